// core::CommActivity: what this thread is doing, for error and timeout
// messages of communication (and of anything else that waits on a peer).
// Scopes nest ("step 7" then "micro-batch 2, recv activation"); current()
// joins them with ", ". Thread-local; not copyable.
#pragma once

#include <string>

namespace sluice {

class CommActivity {
 public:
  explicit CommActivity(std::string what);
  ~CommActivity();
  CommActivity(const CommActivity&) = delete;
  CommActivity& operator=(const CommActivity&) = delete;
  static std::string current();  // "" when none
};

}  // namespace sluice
