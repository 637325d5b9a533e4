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
  explicit HostBuffer(size_t n) : data_(n, 0.0f) { span_ = data_; }

 private:
  std::vector<float> data_;
};

uint64_t IdOf(const Event& e) { return static_cast<const HostEvent&>(e).id; }

class HostQueue : public Queue {
 public:
  HostQueue(HostBackend* backend, uint64_t id) : Queue(0), backend_(backend), id_(id) {}

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
    return std::make_unique<HostBuffer>(n);
  }
  absl::Status DoUpload(std::span<const float> host, std::span<float> x) override {
    std::copy(host.begin(), host.end(), x.begin());
    return absl::OkStatus();
  }
  absl::Status DoZero(std::span<float> x) override {
    std::fill(x.begin(), x.end(), 0.0f);
    return absl::OkStatus();
  }
  absl::Status DoSparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                               std::span<float> x) override {
    kernels::SparseToDense({idx.data(), val.data(), idx.size()}, 0, x.data(), x.size());
    return absl::OkStatus();
  }
  absl::Status DoZeroAt(std::span<const uint32_t> idx, std::span<float> x) override {
    kernels::ZeroAt(idx.data(), idx.size(), 0, x.data());
    return absl::OkStatus();
  }
  absl::StatusOr<std::span<float>> DoStageToHost(std::span<const float> x) override {
    staging_.assign(x.begin(), x.end());
    return std::span<float>(staging_);
  }
  absl::Status DoStageToDevice(std::span<float> x) override {
    std::copy_n(staging_.begin(), x.size(), x.begin());
    return absl::OkStatus();
  }
  absl::Status DoSynchronize() override { return absl::OkStatus(); }
  absl::StatusOr<size_t> DoAccumulate(std::span<const float> grad, std::span<float> residual,
                                      std::span<float> velocity, float momentum) override {
    return AccumulateIntoResidual(grad, residual, velocity, momentum);
  }
  absl::Status DoSelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                            const kernels::Accumulate* acc, kernels::ThresholdReuse* reuse,
                            kernels::SparseVec* out, size_t* nonfinite) override {
    kernels::SelectTopKStep(x.data(), x.size(), k, index_base, acc, reuse,
                            /*zero_selected=*/true, out, nonfinite);
    return absl::OkStatus();
  }
  absl::Status DoScatterAdd(const kernels::SparseVec& v, uint32_t index_base, float scale,
                            std::span<float> x) override {
    kernels::ScatterAdd(kernels::View(v), index_base, scale, x.data());
    return absl::OkStatus();
  }
  absl::StatusOr<size_t> DoZeroNonFinite(std::span<float> x, size_t* first) override {
    return kernels::ZeroNonFinite(x.data(), x.size(), first);
  }
  absl::StatusOr<double> DoSumOfSquares(std::span<const float> x) override {
    return kernels::SumOfSquares(x.data(), x.size());
  }
  absl::Status DoCopyToHost(std::span<const float> x, std::span<float> host) override {
    std::copy(x.begin(), x.end(), host.begin());
    return absl::OkStatus();
  }

 private:
  HostBackend* const backend_;
  const uint64_t id_;
  std::vector<float> staging_;
};

}  // namespace

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
  return std::make_unique<HostQueue>(this, id);
}

absl::StatusOr<std::shared_ptr<Event>> HostBackend::RecordCaller(uintptr_t stream, const void*) {
  auto e = std::make_shared<HostEvent>(NextEvent());
  Append(absl::StrCat("caller-record e", e->id, " stream ", stream));
  return e;
}

absl::Status HostBackend::CallerWaits(uintptr_t stream, const Event& e) {
  Append(absl::StrCat("caller-wait e", IdOf(e), " stream ", stream));
  return absl::OkStatus();
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
