// Giving freed memory back to the system, whichever malloc the binary
// links: glibc's, or tcmalloc (gperftools), which every tool links
// (tools/common:tool) because the passes and the simulator allocate and
// free many small blocks (docs/workflow.md, "Allocator").

#ifndef TILEC_FORMATS_ALLOCATOR_H_
#define TILEC_FORMATS_ALLOCATOR_H_

namespace tilec {

// Returns the free pages of the heap to the system, so that a phase that
// frees hundreds of MB (emit-device's lowering, the program's objects as
// they are packed) does not leave them counted beside what comes next.
void ReleaseFreedMemory();

}  // namespace tilec

#endif  // TILEC_FORMATS_ALLOCATOR_H_
