/* oplist.c -- names, arities and parameter sizes of the ops, all expanded from
 * GC_OP_LIST so that nothing here can drift from the op enum. */
#include "gpucmp.h"

#include <string.h>

static const char *const op_names[GC_OP_COUNT] = {
#define X(E, n, P, ni, no) #n,
    GC_OP_LIST(X)
#undef X
};
static const int op_nin[GC_OP_COUNT] = {
#define X(E, n, P, ni, no) ni,
    GC_OP_LIST(X)
#undef X
};
static const int op_nout[GC_OP_COUNT] = {
#define X(E, n, P, ni, no) no,
    GC_OP_LIST(X)
#undef X
};
static const size_t op_psize[GC_OP_COUNT] = {
#define X(E, n, P, ni, no) sizeof(P),
    GC_OP_LIST(X)
#undef X
};

const char *gc_op_name(gc_op op) { return (unsigned)op < GC_OP_COUNT ? op_names[op] : "?"; }
int gc_op_num_inputs(gc_op op) { return (unsigned)op < GC_OP_COUNT ? op_nin[op] : 0; }
int gc_op_num_outputs(gc_op op) { return (unsigned)op < GC_OP_COUNT ? op_nout[op] : 0; }
size_t gc_op_params_size(gc_op op) { return (unsigned)op < GC_OP_COUNT ? op_psize[op] : 0; }

int gc_op_from_name(const char *name)
{
    for (int i = 0; i < GC_OP_COUNT; i++)
        if (strcmp(op_names[i], name) == 0) return i;
    return -1;
}
