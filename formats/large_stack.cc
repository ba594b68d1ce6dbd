#include "formats/large_stack.h"

#include <pthread.h>

#include <cstring>
#include <exception>
#include <string>

namespace tilec {
namespace {

struct Call {
  const std::function<Status()>* fn;
  Status status;
  std::exception_ptr error;
};

void* Trampoline(void* arg) {
  Call* call = static_cast<Call*>(arg);
  try {
    call->status = (*call->fn)();
  } catch (...) {
    call->error = std::current_exception();
  }
  return nullptr;
}

}  // namespace

Status RunWithStack(size_t bytes, const std::function<Status()>& fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  int error = pthread_attr_setstacksize(&attr, bytes);
  Call call{&fn, Status::Ok(), nullptr};
  pthread_t thread;
  if (error == 0) error = pthread_create(&thread, &attr, Trampoline, &call);
  pthread_attr_destroy(&attr);
  if (error != 0) {
    return Status::Internal("cannot start a thread with a " +
                            std::to_string(bytes >> 20) +
                            " MiB stack: " + std::strerror(error));
  }
  pthread_join(thread, nullptr);
  if (call.error) std::rethrow_exception(call.error);
  return call.status;
}

}  // namespace tilec
