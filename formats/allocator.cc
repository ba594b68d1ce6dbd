#include "formats/allocator.h"

#include <malloc.h>

// tcmalloc's C entry point, declared here rather than from gperftools'
// headers (only its runtime package is installed): weak, so that a binary
// without tcmalloc (tests, the fuzz targets) sees it null.
extern "C" void MallocExtension_ReleaseFreeMemory() __attribute__((weak));

namespace tilec {

void ReleaseFreedMemory() {
  if (MallocExtension_ReleaseFreeMemory != nullptr) {
    MallocExtension_ReleaseFreeMemory();
  } else {
    malloc_trim(0);
  }
}

}  // namespace tilec
