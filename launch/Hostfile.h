// launch::Hostfile: the hosts of a multi-machine job, in the Open MPI /
// DeepSpeed hostfile format.
//
//   # comments and blank lines are ignored
//   node1 slots=4
//   node2 slots=4
//
// One host per line, optionally followed by `slots=N` (ranks it may run;
// default 1) and `max_slots=M` (>= slots; accepted for Open MPI's format,
// not used). A duplicate host, a key given twice on a line, slots < 1 or
// over 65,536, another key, a host name that is not one (only letters,
// digits, '.', '-', '_', ':' and brackets, not starting with '-': it goes to
// mpirun and ssh as an argument) or an empty file is a ConfigError naming the
// file and line. Order matters: ranks fill the hosts
// in this order (see ClusterLaunch.h).
#pragma once

#include <string>
#include <vector>

namespace sluice {

struct HostSlots {
  std::string host;
  int slots = 1;
  int line = 0;  // 1-based, in the file
};

std::vector<HostSlots> parseHostfile(const std::string& text, const std::string& origin);
std::vector<HostSlots> readHostfile(const std::string& path);

}  // namespace sluice
