// Tests only: runs a function on a thread with a small stack, the size of
// the threads that run it in production (common::kRequestStackBytes for the
// HTTP router), so that a recursion the input controls overflows here too.
//
//   RunOnStack(common::kRequestStackBytes, [&] { response = HandleRequest(...); });
//
// Thread safety: any thread; returns when `fn` has returned.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <functional>
#include <stdexcept>

namespace aggswitch::testing {

inline void RunOnStack(size_t stack_bytes, const std::function<void()>& fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, stack_bytes);
  pthread_t thread;
  auto call = [](void* arg) -> void* {
    (*static_cast<const std::function<void()>*>(arg))();
    return nullptr;
  };
  const int rc = pthread_create(&thread, &attr, call, const_cast<std::function<void()>*>(&fn));
  pthread_attr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("pthread_create failed");
  pthread_join(thread, nullptr);
}

}  // namespace aggswitch::testing
