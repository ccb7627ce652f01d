// cudacheck: run inside a job's container by TestRealHandOff (slave/gpu/realgpu_test.go). It
// loads the CUDA driver the NVIDIA Container Toolkit mounted in (libcuda.so.1, found through
// the image's LD_LIBRARY_PATH or ld cache), counts the GPUs it can use, and on the first one
// allocates 256 MiB, fills it and reads part of it back: proof that the job can compute on its
// GPU, not only see its device node. It needs no CUDA headers (the few driver calls are
// declared here) and prints one line starting "cuda:"; exit 0 also when no GPU is visible.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

#define LOAD(name, type)                                              \
	__typeof__(type) name = (__typeof__(type))dlsym(lib, #name); \
	if (!name) {                                                  \
		printf("cuda: %s missing from libcuda.so.1\n", #name); \
		return 1;                                             \
	}

int main(void) {
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib) {
		printf("cuda: no driver (%s)\n", dlerror());
		return 0;
	}
	LOAD(cuInit, CUresult (*)(unsigned));
	LOAD(cuDeviceGetCount, CUresult (*)(int *));
	LOAD(cuDeviceGet, CUresult (*)(CUdevice *, int));
	LOAD(cuDeviceGetName, CUresult (*)(char *, int, CUdevice));
	LOAD(cuCtxCreate_v2, CUresult (*)(CUcontext *, unsigned, CUdevice));
	LOAD(cuMemAlloc_v2, CUresult (*)(CUdeviceptr *, size_t));
	LOAD(cuMemsetD8_v2, CUresult (*)(CUdeviceptr, unsigned char, size_t));
	LOAD(cuMemcpyDtoH_v2, CUresult (*)(void *, CUdeviceptr, size_t));
	CUresult r = cuInit(0);
	int n = 0;
	if (r == 0) r = cuDeviceGetCount(&n);
	if (r != 0 || n == 0) {
		printf("cuda: 0 device(s) (cuInit/cuDeviceGetCount error %d)\n", r);
		return 0;
	}
	CUdevice dev;
	char name[256] = "?";
	CUcontext ctx;
	CUdeviceptr p;
	const size_t size = 256u << 20;
	unsigned char back[4096];
	if ((r = cuDeviceGet(&dev, 0)) || (r = cuDeviceGetName(name, sizeof name, dev)) ||
	    (r = cuCtxCreate_v2(&ctx, 0, dev)) || (r = cuMemAlloc_v2(&p, size)) ||
	    (r = cuMemsetD8_v2(p, 0xA5, size)) || (r = cuMemcpyDtoH_v2(back, p + size - sizeof back, sizeof back))) {
		printf("cuda: %d device(s), device 0 failed with error %d\n", n, r);
		return 1;
	}
	for (size_t i = 0; i < sizeof back; i++) {
		if (back[i] != 0xA5) {
			printf("cuda: %d device(s), %s: memory read back wrong at %zu\n", n, name, i);
			return 1;
		}
	}
	printf("cuda: %d device(s), %s: 256 MiB allocated, filled and read back\n", n, name);
	return 0;
}
