"""12 MiB through memfds: a copy into a kept buffer, a write into a fresh memfd, reads through a new and a kept mapping (README here). Plain python3."""
import mmap, os, time, statistics
N = 1024*1024*3*4  # a 1024x1024 IMAGE, float32
src = bytearray(os.urandom(1 << 20)) * 12
def med(f, r=200):
    s=[]
    for _ in range(r):
        t=time.perf_counter(); f(); s.append((time.perf_counter()-t)*1e3)
    return statistics.median(s)
def fresh_memfd_write():
    fd = os.memfd_create("x"); os.ftruncate(fd, N)
    m = mmap.mmap(fd, N); m[:] = src; m.close(); os.close(fd)
fd = os.memfd_create("keep"); os.ftruncate(fd, N); keep = mmap.mmap(fd, N); keep[:] = src
def reused_mapping_write(): keep[:] = src
def remap_populated_read():
    m = mmap.mmap(fd, N, prot=mmap.PROT_READ); bytes(m[:]); m.close()
def kept_mapping_read(): bytes(keep[:])
anon = bytearray(N)
def anon_copy(): anon[:] = src
print("copy into a kept buffer       %.3f ms" % med(anon_copy))
print("write, fresh memfd + mapping  %.3f ms" % med(fresh_memfd_write))
print("write, kept memfd mapping     %.3f ms" % med(reused_mapping_write))
print("read, new mapping of filled   %.3f ms" % med(remap_populated_read))
print("read, kept mapping            %.3f ms" % med(kept_mapping_read))
