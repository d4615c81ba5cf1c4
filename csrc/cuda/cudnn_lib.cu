/* cudnn_lib.cu -- libcudnn opened once at run time (cudnn_lib.cuh says why). */
#include "cudnn_lib.cuh"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static void *g_lib;
static char g_why[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void)
{
    const char *names[] = {"libcudnn.so.9", "libcudnn.so"};
    void *lib = NULL;
    for (int i = 0; i < 2 && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(g_why, sizeof g_why, "%s", "libcudnn.so.9 / libcudnn.so not found");
        return;
    }
    size_t (*version)(void) = (size_t(*)(void))dlsym(lib, "cudnnGetVersion");
    if (!version) {
        snprintf(g_why, sizeof g_why, "%s", "libcudnn has no cudnnGetVersion");
        dlclose(lib);
        return;
    }
    if (version() < 90000) {
        snprintf(g_why, sizeof g_why, "libcudnn is version %zu, 9.x needed", version());
        dlclose(lib);
        return;
    }
    g_lib = lib;
}

void *gc_cudnn_lib(const char **why)
{
    pthread_once(&g_once, load);
    if (!g_lib && why) *why = g_why;
    return g_lib;
}

int gc_cudnn_resolve(const gc_cudnn_sym *syms, size_t n, char *why, size_t why_len)
{
    const char *reason = NULL;
    void *lib = gc_cudnn_lib(&reason);
    if (!lib) {
        snprintf(why, why_len, "%s", reason);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        *syms[i].slot = dlsym(lib, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(why, why_len, "libcudnn has no %s", syms[i].name);
            for (size_t k = 0; k < n; k++) *syms[k].slot = NULL;
            return -1;
        }
    }
    return 0;
}
