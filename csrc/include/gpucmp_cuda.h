/* gpucmp_cuda.h -- what the CUDA backend (csrc/cuda/backend.cu) tells the Python
 * boundary beyond its gc_backend table: the device's properties as the harness needs
 * them (device_info). Plain C, no CUDA headers, so csrc/python compiles without the
 * toolkit; only a CUDA build (GPUCMP_WITH_CUDA) defines the function. */
#ifndef GPUCMP_CUDA_H
#define GPUCMP_CUDA_H

#include "gpucmp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char name[256];             /* cudaDeviceProp.name */
    int cc_major, cc_minor;
    int sms;                    /* SMs the backend's kernels size their grids for: the
                                   green context's granted count under GPUCMP_CUDA_SMS */
    int sms_physical;           /* cudaDevAttrMultiProcessorCount */
    int sm_limit;               /* GPUCMP_CUDA_SMS as requested; 0 when not confined */
    int64_t total_memory_bytes; /* cudaDeviceProp.totalGlobalMem */
    int sm_clock_khz;           /* cudaDevAttrClockRate */
    int memory_clock_khz;       /* cudaDevAttrMemoryClockRate */
    int memory_bus_width_bits;  /* cudaDevAttrGlobalMemoryBusWidth */
    int l2_bytes;               /* cudaDevAttrL2CacheSize */
    int smem_per_sm_bytes;      /* cudaDevAttrMaxSharedMemoryPerMultiprocessor */
    int smem_per_block_optin_bytes;
    char pci_bus_id[64];        /* cudaDeviceGetPCIBusId, "0000:17:00.0" */
    int runtime_version, driver_version;
} gc_cuda_device_info;

/* Reads the attributes (no context is made for them). Under GPUCMP_CUDA_SMS the
 * backend is initialised first -- as its first op would be -- so `sms` is the granted
 * count, and a confinement that cannot be made is this call's error. */
gc_status gc_cuda_device_info_get(const gc_backend *be, gc_cuda_device_info *out);

#ifdef __cplusplus
}
#endif
#endif /* GPUCMP_CUDA_H */
