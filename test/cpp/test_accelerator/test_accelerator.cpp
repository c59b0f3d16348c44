// A test-only PyTorch backend on the PrivateUse1 dispatch key, named
// "testaccel": two devices whose memory is ordinary host memory. It exists so
// that backward passes spanning two accelerators, or an accelerator and the
// CPU, run for real on machines without GPUs: the engine starts a device
// thread per testaccel device and routes nodes to them exactly as it would
// for CUDA devices.
//
// What it implements: a device guard reporting two devices (thread-local
// current device, one default stream each), a host-memory allocator that tags
// each allocation with the current device, the factory and copy kernels, the
// metadata-only view kernels, and a boxed fallback that runs every other
// operator on the CPU (at::native::cpu_fallback).
//
// Never load it into a process that also uses real CUDA devices: PyTorch then
// takes PrivateUse1 for the process's accelerator.

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#if __has_include(<ATen/detail/PrivateUse1HooksInterface.h>)
#include <ATen/detail/PrivateUse1HooksInterface.h>
#define AUTOGRAD_TEST_ACCELERATOR_HAS_HOOKS 1
#endif
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include <cstring>

namespace autograd_test_accelerator {
namespace {

constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;

// The kernels' optional arguments as the operator schemas of this release
// spell them: c10::optional, its own class before torch 2.4 and
// std::optional's alias since.
template <typename T>
using Optional = c10::optional<T>;
constexpr c10::DeviceIndex kDeviceCount = 2;

thread_local c10::DeviceIndex current_device = 0;

struct TestAcceleratorGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kDeviceType;
  }
  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device previous = getDevice();
    setDevice(device);
    return previous;
  }
  c10::Device getDevice() const override {
    return c10::Device(kDeviceType, current_device);
  }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(
        device.type() == kDeviceType, "not a testaccel device: ", device);
    TORCH_CHECK(
        device.index() >= 0 && device.index() < kDeviceCount,
        "testaccel has devices 0 and 1, not ",
        device);
    current_device = device.index();
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    current_device = device.index();
  }
  c10::Stream getStream(c10::Device device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream exchangeStream(c10::Stream stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, stream.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return kDeviceCount;
  }
  // Work is synchronous, so events are trivially complete.
  void record(
      void** /*event*/,
      const c10::Stream& /*stream*/,
      const c10::DeviceIndex /*device_index*/,
      const c10::EventFlag /*flag*/) const override {}
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override {
    return true;
  }
  void destroyEvent(void* /*event*/, const c10::DeviceIndex /*device_index*/)
      const noexcept override {}
  bool queryStream(const c10::Stream& /*stream*/) const override {
    return true;
  }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TestAcceleratorGuardImpl);

void free_host_memory(void* data) {
  c10::free_cpu(data);
}

// Host memory, tagged with the current testaccel device.
//
// Note [Allocator members that changed across releases]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// c10::Allocator::allocate() is const in older releases (2.0) and not in
// newer ones, where copy_data() joined the interface. Both overloads are
// defined, and neither they nor copy_data() say `override`: whichever the
// interface declares is overridden, the other is a plain member nobody calls.
// A pure virtual left unimplemented would still fail to compile, at
// host_memory_allocator below.
struct HostMemoryAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) {
    return allocate_host_memory(nbytes);
  }
  c10::DataPtr allocate(size_t nbytes) const {
    return allocate_host_memory(nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &free_host_memory;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const {
    std::memcpy(dest, src, count);
  }

 private:
  static c10::DataPtr allocate_host_memory(size_t nbytes) {
    void* data = nbytes == 0 ? nullptr : c10::alloc_cpu(nbytes);
    return {
        data,
        data,
        &free_host_memory,
        c10::Device(kDeviceType, current_device)};
  }
};

HostMemoryAllocator host_memory_allocator;
REGISTER_ALLOCATOR(kDeviceType, &host_memory_allocator);

// Grows a testaccel storage to `newsize` bytes on the device it was
// allocated on, keeping its contents.
void resize_bytes(const c10::Storage& storage, size_t newsize) {
  const c10::DeviceGuard guard(storage.device());
  c10::DataPtr grown = host_memory_allocator.allocate(newsize);
  const size_t kept = std::min(newsize, storage.nbytes());
  if (kept > 0) {
    std::memcpy(grown.get(), storage.data(), kept);
  }
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(grown));
  storage.unsafeGetStorageImpl()->set_nbytes(newsize);
}

#ifdef AUTOGRAD_TEST_ACCELERATOR_HAS_HOOKS
// Note [Hooks that only newer releases declare]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The hooks interface grew over the releases: 2.1 and 2.2 lack
// hasPrimaryContext(), and isBuilt(), isAvailable() and isPinnedPtr() came
// after 2.4. So no member here says `override`: where the
// interface declares one, a member of the same signature overrides it all the
// same; where it does not, it is a plain member nobody calls. Releases before
// the interface existed (2.0) need none of it: the device guard and the
// kernels below are all the engine and these tests use.
struct TestAcceleratorHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const {
    return true;
  }
  bool isAvailable() const {
    return true;
  }
  bool hasPrimaryContext(c10::DeviceIndex /*device_index*/) const {
    return true;
  }
  c10::DeviceIndex deviceCount() const {
    return kDeviceCount;
  }
  c10::DeviceIndex getCurrentDevice() const {
    return current_device;
  }
  void setCurrentDevice(c10::DeviceIndex device) const {
    current_device = device;
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const {
    const c10::DeviceIndex previous = current_device;
    current_device = device;
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const {
    return exchangeDevice(device);
  }
  bool isPinnedPtr(const void* /*data*/) const {
    return false;
  }
  at::Device getDeviceFromPtr(void* /*data*/) const {
    return c10::Device(kDeviceType, current_device);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize)
      const {
    resize_bytes(storage, newsize);
  }
};
#endif

const bool registered_backend = [] {
  c10::register_privateuse1_backend("testaccel");
#ifdef AUTOGRAD_TEST_ACCELERATOR_HAS_HOOKS
  static TestAcceleratorHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
#endif
  return true;
}();

// --- Kernels -----------------------------------------------------------------

c10::DispatchKeySet key_set() {
  return c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
}

c10::Device target_device(Optional<c10::Device> device) {
  return device.has_value() && device->has_index()
      ? *device
      : c10::Device(kDeviceType, current_device);
}

at::Tensor empty_memory_format(
    c10::IntArrayRef size,
    Optional<c10::ScalarType> dtype,
    Optional<c10::Layout> /*layout*/,
    Optional<c10::Device> device,
    Optional<bool> /*pin_memory*/,
    Optional<c10::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(target_device(device));
  return at::detail::empty_generic(
      size,
      &host_memory_allocator,
      key_set(),
      c10::dtype_or_default(dtype),
      memory_format);
}

at::Tensor empty_strided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    Optional<c10::ScalarType> dtype,
    Optional<c10::Layout> /*layout*/,
    Optional<c10::Device> device,
    Optional<bool> /*pin_memory*/) {
  const c10::DeviceGuard guard(target_device(device));
  return at::detail::empty_strided_generic(
      size,
      stride,
      &host_memory_allocator,
      key_set(),
      c10::dtype_or_default(dtype));
}

// A CPU tensor over the same bytes (testaccel memory is host memory).
at::Tensor host_alias(const at::Tensor& t) {
  if (t.device().is_cpu()) {
    return t;
  }
  return at::from_blob(
      t.data_ptr(), t.sizes(), t.strides(), t.options().device(c10::kCPU));
}

at::Tensor copy_from(
    const at::Tensor& self,
    const at::Tensor& dst,
    bool /*non_blocking*/) {
  TORCH_CHECK(self.sizes() == dst.sizes(), "testaccel copy: size mismatch");
  if (self.numel() > 0) {
    host_alias(dst).copy_(host_alias(self));
  }
  return dst;
}

const at::Tensor& resize_(
    const at::Tensor& self,
    c10::IntArrayRef size,
    Optional<c10::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  const size_t needed =
      (impl->storage_offset() + impl->numel()) * self.dtype().itemsize();
  const c10::Storage& storage = impl->unsafe_storage();
  if (needed > storage.nbytes()) {
    resize_bytes(storage, needed);
  }
  if (memory_format.has_value()) {
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  resize_(dst, self.sizes(), c10::nullopt);
  return copy_from(self, dst, false);
}

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", &empty_memory_format);
  m.impl("empty_strided", &empty_strided);
  m.impl("_copy_from", &copy_from);
  m.impl("_copy_from_and_resize", &copy_from_and_resize);
  m.impl("resize_", &resize_);
  m.impl("as_strided", &at::native::as_strided_tensorimpl);
  m.impl("view", &at::native::view);
  m.impl("_reshape_alias", &at::native::_reshape_alias);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_cpu>());
}

} // namespace autograd_test_accelerator
