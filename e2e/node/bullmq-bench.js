// The BullMQ case of `just bench` (e2e/scripts/bench.sh, issue 39): adds <jobs> jobs with addBulk
// in chunks of 200, then a Worker at concurrency 16 completes them; prints one JSON line with
// both rates and whether every job completed exactly once.
// Usage: node bullmq-bench.js redis://host:port/0 [jobs] [label]
'use strict';
const { Queue, Worker } = require('bullmq');

const [url, jobs, label] = [process.argv[2], Number(process.argv[3] || 2000), process.argv[4] || 'bullmq'];
const { hostname, port } = new URL(url);
const connection = { host: hostname, port: Number(port), maxRetriesPerRequest: null };
const name = `bench-${process.pid}`;
const CHUNK = 200;
const CONCURRENCY = 16;

async function main() {
  const queue = new Queue(name, { connection });
  await queue.waitUntilReady();
  const addStart = process.hrtime.bigint();
  for (let first = 0; first < jobs; first += CHUNK) {
    const chunk = Array.from({ length: Math.min(CHUNK, jobs - first) }, (_, i) => ({
      name: 'job',
      data: { n: first + i },
    }));
    await queue.addBulk(chunk);
  }
  const addSeconds = Number(process.hrtime.bigint() - addStart) / 1e9;

  const runs = new Map();
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  const completeStart = process.hrtime.bigint();
  const worker = new Worker(name, async (job) => {
    runs.set(job.data.n, (runs.get(job.data.n) || 0) + 1);
    return job.data.n;
  }, { connection, concurrency: CONCURRENCY });
  let completed = 0;
  worker.on('completed', () => {
    completed += 1;
    if (completed === jobs) done();
  });
  const limit = setTimeout(() => done(), 600_000);
  await finished;
  const completeSeconds = Number(process.hrtime.bigint() - completeStart) / 1e9;
  clearTimeout(limit);
  await worker.close();
  const counts = await queue.getJobCounts('completed', 'failed', 'wait', 'active');
  const twice = [...runs.values()].filter((n) => n > 1).length;
  const exactlyOnce = runs.size === jobs && twice === 0 && counts.completed === jobs;
  await queue.close();
  console.log(JSON.stringify({
    target: label,
    jobs,
    add_rate: jobs / addSeconds,
    complete_rate: completed / completeSeconds,
    completed,
    run_twice: twice,
    exactly_once: exactlyOnce,
  }));
  if (!exactlyOnce) process.exitCode = 1;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
