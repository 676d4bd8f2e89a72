"""The rq case of `just bench` (e2e/scripts/bench.sh, issue 39): a second job queue beside BullMQ.

Enqueues JOBS jobs with `Queue.enqueue_many` in pipelines of 200, then WORKERS rq SimpleWorkers
(one process each, burst mode: each stops once the queue is empty) run them; prints one JSON line
with both rates and whether every job ran exactly once (finished, with one result each, its
value the job's own number). rq keeps a queue as a list, each job as a hash, its state in sorted
sets and its results in a stream, and moves a job between them in MULTI/EXEC pipelines: the
other shape of a job queue on Redis, next to BullMQ's Lua scripts.

Usage: python rq_bench.py redis://host:port/0 [jobs] [label]
"""

import json
import multiprocessing
import sys
import time

from redis import Redis
from rq import Queue, SimpleWorker
from rq.job import Job, JobStatus

CHUNK = 200
WORKERS = 4


def work(url, name):
    connection = Redis.from_url(url)
    queue = Queue(name, connection=connection)
    # Jobs run in this process (no fork per job), so the rate is the queue's, not fork's.
    SimpleWorker([queue], connection=connection).work(burst=True, logging_level="WARNING")


def main():
    url = sys.argv[1]
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    label = sys.argv[3] if len(sys.argv) > 3 else "rq"
    name = f"bench-{multiprocessing.current_process().pid}"
    connection = Redis.from_url(url)
    queue = Queue(name, connection=connection)

    start = time.monotonic()
    ids = []
    for first in range(0, jobs, CHUNK):
        # `builtins.abs` of the job's number returns the number: each result names its job.
        data = [Queue.prepare_data("builtins.abs", args=(n,)) for n in range(first, min(first + CHUNK, jobs))]
        with connection.pipeline() as pipe:
            ids += [job.id for job in queue.enqueue_many(data, pipeline=pipe)]
            pipe.execute()
    add_seconds = time.monotonic() - start

    start = time.monotonic()
    workers = [multiprocessing.Process(target=work, args=(url, name)) for _ in range(WORKERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(600)
    complete_seconds = time.monotonic() - start

    finished = 0
    twice = 0
    for chunk in range(0, len(ids), CHUNK):
        for n, job in enumerate(Job.fetch_many(ids[chunk:chunk + CHUNK], connection=connection), chunk):
            if job is None or job.get_status() != JobStatus.FINISHED or job.return_value() != n:
                continue
            finished += 1
            twice += len(job.results()) > 1
    exactly_once = finished == jobs and twice == 0 and queue.count == 0
    print(json.dumps({
        "target": label,
        "jobs": jobs,
        "add_rate": jobs / add_seconds,
        "complete_rate": finished / complete_seconds,
        "completed": finished,
        "run_twice": twice,
        "exactly_once": exactly_once,
    }))
    return 0 if exactly_once else 1


if __name__ == "__main__":
    sys.exit(main())
