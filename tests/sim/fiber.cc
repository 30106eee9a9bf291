#include "tests/sim/fiber.h"

#include <cstdint>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#define AGG_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AGG_SIM_ASAN 1
#endif
#endif

#ifdef AGG_SIM_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace aggswitch::sim {

namespace {

thread_local Fiber* g_current = nullptr;

#ifdef AGG_SIM_ASAN
void StartSwitch(void** fake_stack_save, const void* bottom, size_t size) {
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
}
void FinishSwitch(void* fake_stack_save, const void** bottom_old, size_t* size_old) {
  __sanitizer_finish_switch_fiber(fake_stack_save, bottom_old, size_old);
}
#else
void StartSwitch(void**, const void*, size_t) {}
void FinishSwitch(void*, const void**, size_t*) {}
#endif

}  // namespace

Fiber::Fiber(std::function<void()> body)
    : body_(std::move(body)), stack_(new char[kStackBytes]) {}

Fiber::~Fiber() {
  // A fiber that started and never returned still has frames on its stack;
  // the simulator always lets its fibers run to the end (a crashed rank's
  // transport fails its waits, which unwinds the engine).
  if (started_ && !done_) std::abort();
}

void Fiber::Trampoline(unsigned lo, unsigned hi) {
  auto* self = reinterpret_cast<Fiber*>((uintptr_t{hi} << 32) | uintptr_t{lo});
  FinishSwitch(nullptr, &self->caller_stack_bottom_, &self->caller_stack_size_);
  self->body_();
  self->done_ = true;
  // Back to the resumer for good: the fake stack of this fiber is dropped.
  StartSwitch(nullptr, self->caller_stack_bottom_, self->caller_stack_size_);
  swapcontext(&self->context_, &self->caller_);
}

void Fiber::Resume() {
  if (done_ || g_current != nullptr) std::abort();
  if (!started_) {
    started_ = true;
    getcontext(&context_);
    context_.uc_stack.ss_sp = stack_.get();
    context_.uc_stack.ss_size = kStackBytes;
    context_.uc_link = nullptr;
    const auto p = reinterpret_cast<uintptr_t>(this);
    makecontext(&context_, reinterpret_cast<void (*)()>(&Fiber::Trampoline), 2,
                static_cast<unsigned>(p & 0xffffffffu), static_cast<unsigned>(p >> 32));
  }
  g_current = this;
  void* fake = nullptr;
  StartSwitch(&fake, stack_.get(), kStackBytes);
  swapcontext(&caller_, &context_);
  FinishSwitch(fake, nullptr, nullptr);
  g_current = nullptr;
}

void Fiber::Yield() {
  Fiber* self = g_current;
  if (self == nullptr) std::abort();
  StartSwitch(&self->fake_stack_, self->caller_stack_bottom_, self->caller_stack_size_);
  swapcontext(&self->context_, &self->caller_);
  FinishSwitch(self->fake_stack_, &self->caller_stack_bottom_, &self->caller_stack_size_);
}

bool Fiber::InFiber() { return g_current != nullptr; }

}  // namespace aggswitch::sim
