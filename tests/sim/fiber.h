// Fibers for the fabric simulator: a rank's client engine runs its blocking
// allreduce on a stack of its own, and gives the one thread back to the
// simulator whenever it waits (SimTransport::Wait). Only one fiber or the
// scheduler runs at a time, so a scenario stays a single-threaded function
// of its seed. ucontext underneath, with AddressSanitizer told of each
// stack switch.
//
//   Fiber f([&] { ... Fiber::Yield(); ... });   // the body runs on its own stack
//   f.Resume();                                 // until it yields or returns
//   if (f.done()) ...
//
// Thread safety: one thread (the simulator's) creates, resumes and
// destroys fibers; Yield only from inside a running fiber.
#pragma once

#include <ucontext.h>

#include <cstddef>
#include <functional>
#include <memory>

namespace aggswitch::sim {

class Fiber {
 public:
  static constexpr size_t kStackBytes = 512 * 1024;

  explicit Fiber(std::function<void()> body);
  // A fiber must have returned (done()) or never started: its stack is freed
  // without unwinding it.
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Runs the body until it yields or returns. Not from inside a fiber.
  void Resume();
  bool done() const { return done_; }
  bool started() const { return started_; }

  // Gives the thread back to whoever resumed the running fiber.
  static void Yield();
  // Whether the caller runs inside a fiber.
  static bool InFiber();

 private:
  static void Trampoline(unsigned lo, unsigned hi);

  std::function<void()> body_;
  std::unique_ptr<char[]> stack_;
  ucontext_t context_{};
  ucontext_t caller_{};
  bool started_ = false;
  bool done_ = false;
  // AddressSanitizer's view of the resumer's stack, kept across a switch.
  const void* caller_stack_bottom_ = nullptr;
  size_t caller_stack_size_ = 0;
  void* fake_stack_ = nullptr;
};

}  // namespace aggswitch::sim
