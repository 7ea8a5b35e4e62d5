"""A 12 MiB tensor through isohost.Host, split by what crosses: nothing, the tensor in only,
in and out, in and out and read on return. Run with a python that has torch, with
ISOHOST_BUILD_PYTHON=build/python (README here)."""
import sys, time, statistics, os
sys.path.insert(0, os.environ["ISOHOST_BUILD_PYTHON"])
import torch, isohost
def med(f, r=200):
    for _ in range(5): f()
    s=[]
    for _ in range(r):
        t=time.perf_counter(); f(); s.append((time.perf_counter()-t)*1e3)
    return statistics.median(s)
img = torch.rand(1, 1024, 1024, 3)
with isohost.Host({"env": {"b": {"python": sys.executable, "path": [os.path.dirname(os.path.abspath(__file__))]}}}) as host:
    print("call, nothing          %.3f" % med(lambda: host.call("b", "nodes_bench:nothing")))
    print("call, sum of 12 MiB in %.3f" % med(lambda: host.call("b", "nodes_bench:touch", img)))
    print("call, 12 MiB in+out    %.3f" % med(lambda: host.call("b", "nodes_bench:ident", img)))
    print("  + touched on return  %.3f" % med(lambda: float(host.call("b", "nodes_bench:ident", img).sum())))
    print("call, invert          %.3f" % med(lambda: host.call("b", "nodes_bench:invert", img)))
    print("in process: invert    %.3f" % med(lambda: 1.0 - img))
    print("in process: sum       %.3f" % med(lambda: float(img.sum())))
    print("in process: clone     %.3f" % med(lambda: img.clone()))
