#include "device/host_backend.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/call_frame.h"

namespace gradex::device {
namespace {

class HostEvent : public Event {
 public:
  explicit HostEvent(uint64_t id) : id(id) {}
  const uint64_t id;
};

class HostBuffer : public Buffer {
 public:
  HostBuffer(size_t n, std::shared_ptr<HostBackend::Live> live)
      : data_(n, 0.0f), live_(std::move(live)) {
    span_ = data_;
    live_->bytes += n * sizeof(float);
  }
  ~HostBuffer() override { live_->bytes -= data_.size() * sizeof(float); }

 private:
  std::vector<float> data_;
  std::shared_ptr<HostBackend::Live> live_;
};

uint64_t IdOf(const Event& e) { return static_cast<const HostEvent&>(e).id; }

class HostQueue : public Queue {
 public:
  HostQueue(HostBackend* backend, uint64_t id, std::shared_ptr<HostBackend::Live> live,
            uint64_t limit)
      : Queue(0), backend_(backend), id_(id), live_(std::move(live)), limit_(limit) {}

  absl::Status Wait(const Event& e) override {
    backend_->Append(absl::StrCat("queue q", id_, " wait e", IdOf(e)));
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<Event>> Record() override {
    auto e = std::make_shared<HostEvent>(backend_->NextEvent());
    backend_->Append(absl::StrCat("queue q", id_, " record e", e->id));
    return e;
  }

 protected:
  absl::StatusOr<std::unique_ptr<Buffer>> DoAllocate(size_t n) override {
    backend_->CountAllocation(n);
    return std::make_unique<HostBuffer>(n, live_);
  }
  absl::StatusOr<PoolUse> DoPoolUse() override {
    const uint64_t bytes = live_->bytes;
    return PoolUse{.held = bytes, .used = bytes, .limit = limit_};
  }
  absl::StatusOr<std::span<std::byte>> DoGrowPinned(Pinned, size_t bytes) override {
    // The old region stays, as the CUDA queue's does.
    pinned_.push_back(std::make_unique<std::byte[]>(bytes));
    return std::span<std::byte>(pinned_.back().get(), bytes);
  }
  absl::Status DoUpload(std::span<const float> host, std::span<float> x) override {
    if (absl::Status s = Reported(); !s.ok()) return s;
    std::copy(host.begin(), host.end(), x.begin());
    return absl::OkStatus();
  }
  absl::Status DoZero(std::span<float> x) override {
    std::fill(x.begin(), x.end(), 0.0f);
    return Launched("Zero");
  }
  absl::Status DoSparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                               std::span<float> x) override {
    kernels::SparseToDense({idx.data(), val.data(), idx.size()}, 0, x.data(), x.size());
    return Launched("SparseToDense");
  }
  absl::Status DoZeroAt(std::span<const uint32_t> idx, std::span<float> x) override {
    kernels::ZeroAt(idx.data(), idx.size(), 0, x.data());
    return Launched("ZeroAt");
  }
  absl::Status DoScatterAdd(std::span<const uint32_t> idx, std::span<const float> val,
                            uint32_t index_base, float scale, std::span<float> x) override {
    kernels::ScatterAdd({idx.data(), val.data(), idx.size()}, index_base, scale, x.data());
    return Launched("ScatterAdd");
  }
  absl::Status DoUploadStaged(std::span<const float> staged, std::span<float> x) override {
    std::copy(staged.begin(), staged.end(), x.begin());
    return Launched("UploadStaged");
  }
  absl::Status DoStageToHost(std::span<const float> x) override {
    if (absl::Status s = Reported(); !s.ok()) return s;
    std::copy(x.begin(), x.end(), reinterpret_cast<float*>(pinned(Pinned::kBucket).data()));
    return absl::OkStatus();
  }
  absl::Status DoStageToDevice(std::span<float> x) override {
    const float* staged = reinterpret_cast<const float*>(pinned(Pinned::kBucket).data());
    std::copy_n(staged, x.size(), x.begin());
    return Launched("StageToDevice");
  }
  absl::Status DoSynchronize() override { return Reported(); }
  absl::StatusOr<size_t> DoAccumulate(std::span<const float> grad, std::span<float> residual,
                                      std::span<float> velocity, float momentum) override {
    if (absl::Status s = Reported(); !s.ok()) return s;
    return collectives::AccumulateIntoResidual(grad, residual, velocity, momentum);
  }
  absl::Status DoAccumulateLater(std::span<const float> grad, std::span<float> residual,
                                 std::span<float> velocity, float momentum) override {
    (void)collectives::AccumulateIntoResidual(grad, residual, velocity, momentum);
    return absl::OkStatus();
  }
  absl::Status DoSelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                            const kernels::Accumulate* acc, kernels::SparseVec* out,
                            size_t* nonfinite) override {
    if (absl::Status s = Reported(); !s.ok()) return s;
    kernels::SelectTopKStep(x.data(), x.size(), k, index_base, acc, nullptr,
                            /*zero_selected=*/true, out, nonfinite);
    return absl::OkStatus();
  }
  absl::Status DoSelectTopKBlocks(std::span<float> x, const std::vector<size_t>& bounds,
                                  const std::vector<size_t>& keeps, const kernels::Accumulate* acc,
                                  std::vector<kernels::SparseVec>* out,
                                  size_t* nonfinite) override {
    if (absl::Status s = Reported(); !s.ok()) return s;
    kernels::BlockTopKStep(x.data(), bounds, keeps, 0, acc, nullptr, /*zero_selected=*/true, out,
                           nonfinite);
    return absl::OkStatus();
  }
  absl::StatusOr<size_t> DoZeroNonFinite(std::span<float> x, size_t* first) override {
    if (absl::Status s = Reported(); !s.ok()) return s;
    return kernels::ZeroNonFinite(x.data(), x.size(), first);
  }
  absl::Status DoZeroNonFiniteLater(std::span<float> x) override {
    later_count_ = kernels::ZeroNonFinite(x.data(), x.size(), &later_first_);
    return absl::OkStatus();
  }
  size_t DoTakeNonFinite(size_t* first) override {
    *first = later_first_;
    return later_count_;
  }
  absl::StatusOr<double> DoSumOfSquares(std::span<const float> x) override {
    if (absl::Status s = Reported(); !s.ok()) return s;
    return kernels::SumOfSquares(x.data(), x.size());
  }
  absl::Status DoCopyToHost(std::span<const float> x, std::span<float> host) override {
    if (absl::Status s = Reported(); !s.ok()) return s;
    std::copy(x.begin(), x.end(), host.begin());
    return absl::OkStatus();
  }

 private:
  // A queued operation: an injected fault waits for the queue's next wait.
  absl::Status Launched(const char* op) {
    if (absl::Status f = backend_->Injected(op); !f.ok() && fault_.ok()) fault_ = std::move(f);
    return absl::OkStatus();
  }
  // A wait: reports the fault of work queued before it, once.
  absl::Status Reported() { return std::exchange(fault_, absl::OkStatus()); }

  HostBackend* const backend_;
  const uint64_t id_;
  const std::shared_ptr<HostBackend::Live> live_;
  const uint64_t limit_;
  std::vector<std::unique_ptr<std::byte[]>> pinned_;
  absl::Status fault_;
  size_t later_count_ = 0, later_first_ = 0;
};

}  // namespace

HostBackend::HostBackend(uint64_t pool_limit_bytes) : pool_limit_(pool_limit_bytes) {}

absl::StatusOr<PointerInfo> HostBackend::Classify(const void* p) {
  if (p == nullptr) return absl::InvalidArgumentError("device memory: a null pointer");
  return PointerInfo{.device = true, .managed = false, .ordinal = 0};
}

absl::StatusOr<std::unique_ptr<Queue>> HostBackend::NewQueue(const void* data) {
  if (data == nullptr) return absl::InvalidArgumentError("device memory: a null pointer");
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    id = next_queue_++;
  }
  return std::make_unique<HostQueue>(this, id, live_, pool_limit_);
}

absl::StatusOr<std::shared_ptr<Event>> HostBackend::RecordCaller(uintptr_t stream, const void*) {
  auto e = std::make_shared<HostEvent>(NextEvent());
  Append(absl::StrCat("caller-record e", e->id, " stream ", stream));
  return e;
}

absl::Status HostBackend::CallerWaits(uintptr_t stream, const Event& e) {
  if (absl::Status f = Injected("CallerWaits"); !f.ok()) return f;
  Append(absl::StrCat("caller-wait e", IdOf(e), " stream ", stream));
  return absl::OkStatus();
}

PoolUse HostBackend::Pools() {
  const uint64_t bytes = live_->bytes;
  return PoolUse{.held = bytes, .used = bytes, .limit = pool_limit_};
}

void HostBackend::Trim() {
  absl::MutexLock lock(&mu_);
  ++trims_;
}

uint64_t HostBackend::trims() const {
  absl::MutexLock lock(&mu_);
  return trims_;
}

void HostBackend::FailNext(std::string op, absl::Status fault) {
  absl::MutexLock lock(&mu_);
  faults_[std::move(op)] = std::move(fault);
}

absl::Status HostBackend::Injected(const char* op) {
  absl::MutexLock lock(&mu_);
  auto it = faults_.find(op);
  if (it == faults_.end()) return absl::OkStatus();
  absl::Status f = std::move(it->second);
  faults_.erase(it);
  return f;
}

std::vector<std::string> HostBackend::Log() const {
  absl::MutexLock lock(&mu_);
  return log_;
}

uint64_t HostBackend::allocations() const {
  absl::MutexLock lock(&mu_);
  return allocations_;
}

uint64_t HostBackend::allocated_floats() const {
  absl::MutexLock lock(&mu_);
  return allocated_floats_;
}

void HostBackend::Append(std::string line) {
  absl::MutexLock lock(&mu_);
  log_.push_back(std::move(line));
}

uint64_t HostBackend::NextEvent() {
  absl::MutexLock lock(&mu_);
  return ++next_event_;
}

void HostBackend::CountAllocation(size_t n) {
  absl::MutexLock lock(&mu_);
  ++allocations_;
  allocated_floats_ += n;
}

}  // namespace gradex::device
