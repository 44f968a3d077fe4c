/* nn.h - the row-wise encoder ops moved into the compute layer: this header
 * only forwards to src/core/ops.h (new code includes that). */
#ifndef OMNI_NN_H
#define OMNI_NN_H

#include "src/core/ops.h"

#endif
