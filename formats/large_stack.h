// Recursive algorithms whose depth an input decides (the ONNX importer's
// emission of a chain of ops) run on a stack sized for their bound instead
// of the main thread's 8 MiB.

#ifndef TILEC_FORMATS_LARGE_STACK_H_
#define TILEC_FORMATS_LARGE_STACK_H_

#include <cstddef>
#include <functional>

#include "formats/status.h"

namespace tilec {

// Runs `fn` on a thread of its own with a stack of `bytes` (reserved, not
// committed: pages are touched only as deep as the recursion goes) and
// waits for it. An exception `fn` throws is rethrown here. Internal when
// the thread cannot be started.
Status RunWithStack(size_t bytes, const std::function<Status()>& fn);

}  // namespace tilec

#endif  // TILEC_FORMATS_LARGE_STACK_H_
