// The C ABI (gradex.h) over gradex::client::Client.
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/client/c_api_internal.h"
#include "services/client/client.h"
#include "services/client/gradex.h"
#include "services/client/option_table.h"

struct gradex_client {
  std::unique_ptr<gradex::client::Client> client;
};

namespace gradex::client {

thread_local std::string t_error;

int Fail(const absl::Status& s) {
  t_error = std::string(s.message());
  return static_cast<int>(s.code());
}

int Report(const absl::Status& s) {
  if (s.ok()) {
    t_error.clear();
    return GRADEX_OK;
  }
  return Fail(s);
}

Rendezvous FromC(const gradex_rendezvous* r) {
  Rendezvous out;
  if (r == nullptr) return out;
  const gradex_rendezvous c = *r;
  if (c.set != nullptr) {
    out.set = [c](const std::string& key, const std::string& value) {
      return c.set(c.user, key.c_str(), value.c_str()) == 0
                 ? absl::OkStatus()
                 : absl::UnavailableError(absl::StrCat("rendezvous set '", key, "' failed"));
    };
  }
  if (c.get != nullptr) {
    out.get = [c](const std::string& key) -> absl::StatusOr<std::string> {
      std::string buf(256, '\0');
      for (int attempt = 0; attempt < 2; ++attempt) {
        const long n = c.get(c.user, key.c_str(), buf.data(), buf.size());
        if (n < 0) return absl::NotFoundError(absl::StrCat("rendezvous get '", key, "' failed"));
        if (static_cast<size_t>(n) <= buf.size()) return buf.substr(0, n);
        if (n > (1 << 20)) return absl::InvalidArgumentError("rendezvous value over 1 MiB");
        buf.assign(n, '\0');
      }
      return absl::InternalError("rendezvous get: the value kept growing");
    };
  }
  return out;
}

namespace {

absl::Status Spans(const uint64_t* keys, const size_t* elements, size_t spans, const float* data,
                   size_t n, std::vector<ParamSpan>* out) {
  if (data == nullptr || n == 0) return absl::InvalidArgumentError("no data");
  if (spans == 0 || keys == nullptr || elements == nullptr) {
    return absl::InvalidArgumentError("no spans");
  }
  if (spans > n) return absl::InvalidArgumentError("more spans than elements");
  for (size_t i = 0; i < spans; ++i) out->push_back({keys[i], elements[i]});
  return absl::OkStatus();
}

}  // namespace
}  // namespace gradex::client

using gradex::client::Client;
using gradex::client::Fail;
using gradex::client::Report;

extern "C" {

const char* gradex_last_error(void) { return gradex::client::t_error.c_str(); }

int gradex_create(const char* const* keys, const char* const* values, size_t count, int use_env,
                  const gradex_rendezvous* rendezvous, gradex_client** out) {
  if (out == nullptr) return Fail(absl::InvalidArgumentError("gradex_create: out is NULL"));
  *out = nullptr;
  if (count > 0 && (keys == nullptr || values == nullptr)) {
    return Fail(absl::InvalidArgumentError("gradex_create: keys or values is NULL"));
  }
  gradex::client::ClientOptions o;
  if (use_env) {
    if (absl::Status s = gradex::client::ApplyEnvironment(&o); !s.ok()) return Fail(s);
  }
  for (size_t i = 0; i < count; ++i) {
    if (keys[i] == nullptr || values[i] == nullptr) {
      return Fail(
          absl::InvalidArgumentError(absl::StrCat("gradex_create: option ", i, " is NULL")));
    }
    if (absl::Status s = gradex::client::SetFromCKey(&o, keys[i], values[i]); !s.ok())
      return Fail(s);
  }
  gradex::client::ApplyDependentDefaults(&o);
  absl::StatusOr<std::unique_ptr<Client>> c =
      Client::Create(std::move(o), gradex::client::FromC(rendezvous));
  if (!c.ok()) return Fail(c.status());
  *out = new gradex_client{*std::move(c)};
  return Report(absl::OkStatus());
}

int gradex_allreduce_async(gradex_client* c, const uint64_t* span_keys, const size_t* span_elements,
                           size_t spans, float* data, size_t n, int memory, int last_in_step,
                           gradex_done_fn done, void* user) {
  if (c == nullptr || c->client == nullptr) {
    return Fail(absl::InvalidArgumentError("gradex: NULL client"));
  }
  if (memory != GRADEX_HOST && memory != GRADEX_DEVICE) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("gradex: memory ", memory, " unknown")));
  }
  std::vector<gradex::client::ParamSpan> s;
  if (absl::Status st = gradex::client::Spans(span_keys, span_elements, spans, data, n, &s);
      !st.ok()) {
    return Fail(st);
  }
  c->client->AllreduceAsync(
      std::move(s), std::span<float>(data, n),
      memory == GRADEX_DEVICE ? gradex::client::Memory::kDevice : gradex::client::Memory::kHost,
      last_in_step != 0, [done, user](absl::Status st) {
        if (done == nullptr) return;
        const std::string message(st.message());
        done(user, static_cast<int>(st.code()), message.c_str());
      });
  return Report(absl::OkStatus());
}

int gradex_allreduce(gradex_client* c, const uint64_t* span_keys, const size_t* span_elements,
                     size_t spans, float* data, size_t n, int memory, int last_in_step) {
  struct Wait {
    std::promise<std::pair<int, std::string>> p;
  } wait;
  auto f = wait.p.get_future();
  int rc = gradex_allreduce_async(
      c, span_keys, span_elements, spans, data, n, memory, last_in_step,
      [](void* user, int status, const char* message) {
        static_cast<Wait*>(user)->p.set_value({status, message});
      },
      &wait);
  if (rc != GRADEX_OK) return rc;
  auto [status, message] = f.get();  // the progress thread always ends a bucket
  if (status == GRADEX_OK) return Report(absl::OkStatus());
  gradex::client::t_error = message;
  return status;
}

int gradex_flush(gradex_client* c) {
  if (c == nullptr) return Fail(absl::InvalidArgumentError("gradex: NULL client"));
  return Report(c->client->Flush());
}

int gradex_save_state(gradex_client* c, char** out, size_t* len) {
  if (c == nullptr || out == nullptr || len == nullptr) {
    return Fail(absl::InvalidArgumentError("gradex_save_state: NULL argument"));
  }
  absl::StatusOr<std::string> s = c->client->SaveState();
  if (!s.ok()) return Fail(s.status());
  *out = static_cast<char*>(std::malloc(s->size() == 0 ? 1 : s->size()));
  if (*out == nullptr) return Fail(absl::ResourceExhaustedError("gradex_save_state: no memory"));
  std::memcpy(*out, s->data(), s->size());
  *len = s->size();
  return Report(absl::OkStatus());
}

int gradex_load_state(gradex_client* c, const char* state, size_t len) {
  if (c == nullptr || (state == nullptr && len > 0)) {
    return Fail(absl::InvalidArgumentError("gradex_load_state: NULL argument"));
  }
  return Report(c->client->LoadState(std::string_view(state == nullptr ? "" : state, len)));
}

void gradex_free(void* p) { std::free(p); }

int gradex_rank(const gradex_client* c) { return c == nullptr ? -1 : c->client->rank(); }
int gradex_world_size(const gradex_client* c) { return c == nullptr ? 0 : c->client->world_size(); }
uint64_t gradex_step(const gradex_client* c) { return c == nullptr ? 0 : c->client->step(); }

int gradex_close(gradex_client* c) {
  if (c == nullptr) return Fail(absl::InvalidArgumentError("gradex: NULL client"));
  return Report(c->client->Close());
}

void gradex_destroy(gradex_client* c) {
  if (c == nullptr) return;
  (void)c->client->Close();
  delete c;
}

}  // extern "C"
