#include "services/coordinator/membership/member_secret.h"

#include <random>

namespace gradex::coordinator::membership {

std::string NewMemberSecret() {
  std::random_device rd;
  std::string s(kMemberSecretBytes, '\0');
  for (size_t i = 0; i < s.size(); i += 4) {
    const uint32_t v = rd();
    for (size_t j = 0; j < 4 && i + j < s.size(); ++j) s[i + j] = static_cast<char>(v >> (8 * j));
  }
  return s;
}

bool SecretMatches(absl::string_view expected, absl::string_view given) {
  if (expected.empty()) return false;
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

}  // namespace gradex::coordinator::membership
