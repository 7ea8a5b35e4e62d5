import time
def ident(x):
    return x
def invert(x):
    return 1.0 - x
def nothing():
    return 1
def touch(x):
    # reads every page of the input, as a node would
    return float(x[0, ::8, ::8, 0].sum()) if False else float(x.sum())
def invert_timed(x):
    t = time.perf_counter(); y = 1.0 - x; d = time.perf_counter() - t
    return d * 1e3
def invert_keep(x):
    y = 1.0 - x
    return y
