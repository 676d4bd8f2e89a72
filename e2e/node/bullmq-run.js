// BullMQ (npm `bullmq`, pinned in package.json) runs a queue over pgvs3's RESP port; driven by
// gateway/tests/resp/bullmq.rs, which reads the JSON report this prints on stdout.
// Usage: node bullmq-run.js redis://host:port/0 <jobs>
'use strict';
const { FlowProducer, Queue, Worker, QueueEvents } = require('bullmq');

const [url, count] = [process.argv[2], Number(process.argv[3] || 20)];
const { hostname, port } = new URL(url);
const connection = { host: hostname, port: Number(port), maxRetriesPerRequest: null };
const name = 'pgvs3';

function within(ms, promise, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

async function main() {
  const queue = new Queue(name, { connection });
  const events = new QueueEvents(name, { connection });
  await events.waitUntilReady();
  const seen = { completed: 0, failed: 0, retried: 0, progress: 0 };
  // The plain jobs, 3 prioritized, the delayed, the retried one, a flow of a parent and two
  // children, and 3 runs of a job scheduler complete; one job fails.
  const expectedEvents = { completed: count + 11, failed: 1 };
  const allEvents = new Promise((resolve) => {
    const check = () => {
      if (seen.completed >= expectedEvents.completed && seen.failed >= expectedEvents.failed) resolve();
    };
    events.on('completed', () => { seen.completed += 1; check(); });
    events.on('failed', ({ failedReason }) => {
      if (failedReason === 'boom') seen.failed += 1;
      check();
    });
    events.on('retries-exhausted', () => { seen.retried += 1; });
    events.on('progress', () => { seen.progress += 1; });
  });

  // Plain jobs, prioritized ones (lower number first), a delayed one, one that fails twice
  // and then succeeds, one that always fails.
  const plain = await queue.addBulk(
    Array.from({ length: count }, (_, i) => ({ name: 'add', data: { a: i, b: 10 * i } })),
  );
  const prioritized = [];
  for (const priority of [3, 1, 2]) {
    prioritized.push(await queue.add('priority', { priority }, { priority }));
  }
  const delayed = await queue.add('add', { a: 1000, b: 1 }, { delay: 300 });
  const delayedState = await delayed.getState();
  const flaky = await queue.add('flaky', {}, { attempts: 3, backoff: { type: 'fixed', delay: 50 } });
  const doomed = await queue.add('doomed', {}, { attempts: 2, backoff: { type: 'exponential', delay: 20 } });
  const before = await queue.getJobCounts('wait', 'prioritized', 'delayed', 'active', 'completed', 'failed');

  // A parent job that runs once its children have, and a scheduler that makes a job every 50 ms,
  // 3 times.
  const flows = new FlowProducer({ connection });
  const flow = await flows.add({
    name: 'parent',
    queueName: name,
    children: [1, 2].map((c) => ({ name: 'child', queueName: name, data: { c } })),
  });
  await flows.close();
  await queue.upsertJobScheduler('tick', { every: 50, limit: 3 }, { name: 'tick' });

  const order = [];
  const worker = new Worker(
    name,
    async (job) => {
      order.push(job.name === 'priority' ? job.data.priority : job.name);
      if (job.name === 'add') {
        await job.updateProgress(50);
        return job.data.a + job.data.b;
      }
      if (job.name === 'child') return 100 * job.data.c;
      if (job.name === 'parent') {
        return Object.values(await job.getChildrenValues()).reduce((sum, value) => sum + value, 0);
      }
      if (job.name === 'tick') return 'tick';
      if (job.name === 'priority') return `priority ${job.data.priority}`;
      if (job.name === 'flaky') {
        if (job.attemptsMade < 2) throw new Error(`flaky attempt ${job.attemptsMade}`);
        return `ok after ${job.attemptsMade} failures`;
      }
      throw new Error('boom');
    },
    { connection, concurrency: 1 },
  );
  worker.on('error', (err) => console.error('worker error:', err));
  await within(60000, allEvents, `every job's event (seen ${JSON.stringify(seen)})`);
  await worker.close();

  const after = async (job) => queue.getJob(job.id);
  const report = {
    delayed_state: delayedState,
    before,
    results: await Promise.all(plain.map(async (job) => (await after(job)).returnvalue)),
    priority_order: order.filter((item) => typeof item === 'number'),
    priority_results: await Promise.all(prioritized.map(async (job) => (await after(job)).returnvalue)),
    delayed: await (async () => {
      const job = await after(delayed);
      return { result: job.returnvalue, waited: job.processedOn - job.timestamp >= 300 };
    })(),
    flaky: await (async () => {
      const job = await after(flaky);
      return { state: await job.getState(), result: job.returnvalue, attempts: job.attemptsMade };
    })(),
    doomed: await (async () => {
      const job = await after(doomed);
      return { state: await job.getState(), reason: job.failedReason, attempts: job.attemptsMade };
    })(),
    parent: (await after(flow.job)).returnvalue,
    ticks: order.filter((item) => item === 'tick').length,
    schedulers: (await queue.getJobSchedulers()).map((s) => s.iterationCount),
    after: await queue.getJobCounts('wait', 'prioritized', 'delayed', 'active', 'completed', 'failed', 'waiting-children'),
    events: seen,
  };
  await events.close();
  await queue.close();
  console.log(JSON.stringify(report));
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
