/* keras_constants.c -- optimizer constants rounded as Keras 3 rounds them.
 *
 * What it provides: gc_one_minus(b), the float32 that Keras 3 multiplies by where its
 * update reads `1 - self.beta_2` (Adam's moments, RMSprop's `1 - rho`): Python computes
 * 1 - b in double from the user's decimal (0.999), and the product rounds that to
 * float32, giving 0.001f; 1.0f - 0.999f is 0.000999987f, 1.3e-5 away, which moves
 * Adam's first steps by ~6e-6 relative -- more than Keras parity allows.
 *
 * Why it is built this way: the core's parameter structs carry float32 betas, so the
 * user's double is gone by the time a kernel runs; but users write these constants as
 * short decimals, and the shortest decimal that rounds to the float (what Python's repr
 * of the float32 prints) is that decimal. So: find it (at most 9 significant digits),
 * take 1 - it in double, round to float. A float with no short decimal form gives the
 * same as 1 - (double)b. Host code only (kernels get the result as a parameter). */
#include "gpucmp.h"

#include <stdio.h>
#include <stdlib.h>

float gc_one_minus(float b)
{
    char text[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, (double)b);
        const double d = strtod(text, NULL);
        if ((float)d == b) return (float)(1.0 - d);
    }
    return (float)(1.0 - (double)b);
}
