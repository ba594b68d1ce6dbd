// The kernels library reports errors with the project's Status
// (formats/status.h): a malformed kernel call is bad input (exit 2).

#ifndef TILEC_KERNELS_STATUS_H_
#define TILEC_KERNELS_STATUS_H_

#include "formats/status.h"

namespace tilec::kernels {

using ::tilec::Status;
using ::tilec::StatusOr;

}  // namespace tilec::kernels

#endif  // TILEC_KERNELS_STATUS_H_
