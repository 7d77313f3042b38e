// json_checks.h — strict reading of the scheduler's own JSON inputs (the `run` spec, the `plan`
// snapshot): a member nothing reads is a typo ("submit_after" for "submit_after_s" would start a
// job at once), so it is refused by name, as is a member of the wrong type.
//
// Thread-safety: pure functions.
#pragma once

#include <rapidjson/document.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>

namespace preempt::sched::json_checks {

// A member name from a file, fit for an error message: at most 64 characters, anything but
// printable ASCII shown as '?'.
inline std::string Printable(const rapidjson::Value& name) {
  std::string s(name.GetString(), name.GetStringLength());
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  for (char& c : s)
    if (c < 0x20 || c > 0x7e) c = '?';
  return s;
}

// The first member of `object` whose name is not one of `known`, printable; "" when there is none
// (or `object` is not an object).
inline std::string UnknownMember(const rapidjson::Value& object, std::initializer_list<const char*> known) {
  if (!object.IsObject()) return "";
  for (auto it = object.MemberBegin(); it != object.MemberEnd(); ++it) {
    const std::string_view name(it->name.GetString(), it->name.GetStringLength());
    if (std::find(known.begin(), known.end(), name) == known.end()) return Printable(it->name);
  }
  return "";
}

// `object` has a member `key` that is not a non-empty string.
inline bool NotANonEmptyString(const rapidjson::Value& object, const char* key) {
  if (!object.IsObject()) return false;
  auto it = object.FindMember(key);
  return it != object.MemberEnd() && (!it->value.IsString() || it->value.GetStringLength() == 0);
}

}  // namespace preempt::sched::json_checks
