"""gradex._C.PsWorker (python/ps_worker_binding.cc): two workers as threads of
this process, rank 0 embedding the coordinator and hosting the server shard;
steps on torch tensors and numpy arrays, stats(), rank 1's metrics_port
serving its gradex_ps_worker_* metrics, and bad input refused.
Exit 77 (skip) when the module or torch is missing."""
import sys
import threading
import urllib.request

try:
    import numpy as np
    import torch
    from gradex import _C
except ImportError as e:  # no module built, or no torch in this Python
    print(f"skip: {e}")
    sys.exit(77)


class Store:
    def __init__(self):
        self.values, self.cv = {}, threading.Condition()

    def set(self, key, value):
        with self.cv:
            self.values[key] = value
            self.cv.notify_all()

    def get(self, key):
        with self.cv:
            if not self.cv.wait_for(lambda: key in self.values, timeout=30):
                raise KeyError(key)
            return self.values[key]


LAYERS = [50, 10]
STEPS = 12
store, results, errors = Store(), {}, []


def run(rank, world):
    try:
        w = _C.PsWorker(LAYERS, density=0.1, job="pybind", rank=rank, world_size=world,
                        timeout_s=30, use_environment=False, rendezvous_set=store.set,
                        rendezvous_get=store.get, metrics_port=0 if rank == 1 else -1)
        params = torch.full((60,), 0.5)
        for s in range(STEPS):
            grad = np.full(60, 0.1 * (rank + 1), dtype=np.float32)
            # numpy and torch inputs alike
            w.step(grad if s % 2 else torch.from_numpy(grad), params, 0.1)
        results[rank] = (w.stats(), params.clone())
        if rank == 0 and w.metrics_port != -1:
            errors.append(f"rank 0 serves metrics on {w.metrics_port} without a metrics_port")
        if rank == 1:
            url = f"http://127.0.0.1:{w.metrics_port}/metrics"
            body = urllib.request.urlopen(url, timeout=10).read().decode()
            samples = dict(line.rsplit(" ", 1) for line in body.splitlines()
                           if line.startswith("gradex_ps_worker_"))
            for name, want in [("gradex_ps_worker_steps_total", STEPS),
                               ("gradex_ps_worker_staleness_versions_count", STEPS),
                               ("gradex_ps_worker_sent_bytes_total", results[rank][0]["sent_bytes"])]:
                if float(samples.get(name, "nan")) != want:
                    errors.append(f"{name} = {samples.get(name)}, want {want}")
            for bad, kind in [(torch.zeros(60, dtype=torch.float64), TypeError),
                              (torch.zeros(6, 10), ValueError),
                              (np.zeros(60, dtype=np.int32), TypeError),
                              ("not a tensor", TypeError)]:
                try:
                    w.step(bad, params, 0.1)
                    errors.append(f"{bad!r:.40} accepted")
                except kind:
                    pass
            try:
                w.step(torch.zeros(59), params, 0.1)
                errors.append("a short grad accepted")
            except _C.GradexError as e:
                assert "INVALID_ARGUMENT" in str(e), e
        w.close()
        try:
            w.step(torch.zeros(60), params, 0.1)
            errors.append("a step after close accepted")
        except _C.GradexError:
            pass
    except Exception as e:  # reported below
        errors.append(f"rank {rank}: {type(e).__name__}: {e}")


threads = [threading.Thread(target=run, args=(r, 2)) for r in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join(timeout=120)
assert not errors, errors
assert sorted(results) == [0, 1], results.keys()
versions = []
for rank, (stats, params) in results.items():
    assert stats["steps"] == STEPS and stats["failed_steps"] == 0, stats
    assert stats["pushes"] == STEPS and stats["full_syncs"] >= 1, stats
    assert stats["sent_bytes"] > 0 and stats["recv_bytes"] > 0, stats
    assert stats["worker"] in (0, 1) and stats["epoch"] >= 1, stats
    assert bool(torch.isfinite(params).all()), params
    versions.append(stats["version"])
# One shard: every push is a version, and the worker that pushed last saw all.
assert max(versions) == 2 * STEPS, versions
print("ok", {r: s["version"] for r, (s, _) in results.items()})
