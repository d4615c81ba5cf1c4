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

/* One kernel launch seen by the launch log (csrc/cuda/launch_log.cu). */
typedef struct {
    char name[128];             /* cudaFuncGetName: the mangled kernel name, "?" if unknown */
    unsigned grid[3], block[3];
    int64_t smem_bytes;         /* dynamic shared memory of the launch */
    int blocks_per_sm;          /* cudaOccupancyMaxActiveBlocksPerMultiprocessor, -1 if unknown */
} gc_cuda_launch;

/* 1 when this build routes kernel launches through the log (setup.py's link wrap). */
int gc_cuda_launch_log_supported(void);
/* Opens the log: every kernel launch of the process is recorded until _end. sms > 0:
 * while it is open, the backend tells its kernels the device has `sms` SMs (grids are
 * sized for that count; results stay correct). One log at a time. */
void gc_cuda_launch_log_begin(int sms);
/* Until called again with 0: the backend tells its kernels the device has `sms` SMs
 * (no log; bench's plan_sms). A log's own sms takes precedence while it is open. */
void gc_cuda_set_plan_sms(int sms);
/* Closes the log, copies up to `max` records into out and returns how many launches
 * were seen (more than were kept when over the log's capacity, 4096). */
int gc_cuda_launch_log_end(gc_cuda_launch *out, int max);

#ifdef __cplusplus
}
#endif
#endif /* GPUCMP_CUDA_H */
