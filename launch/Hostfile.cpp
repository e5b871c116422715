#include "launch/Hostfile.h"

#include <filesystem>
#include <set>
#include <sstream>

#include "core/Error.h"
#include "core/Files.h"

namespace sluice {
namespace {

constexpr int kMaxSlots = 65536;  // ranks on one host: far beyond any machine, and sums of them cannot overflow

int parseCount(const std::string& value, const std::string& where, const std::string& key) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  SLUICE_CHECK(used == value.size() && !value.empty(), ConfigError,
               "hostfile error: " << where << ": " << key << " must be an integer, got '" << value << "'");
  return n;
}

}  // namespace

std::vector<HostSlots> parseHostfile(const std::string& text, const std::string& origin) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  std::istringstream in(text);
  std::string raw;
  for (int number = 1; std::getline(in, raw); ++number) {
    const std::string line = raw.substr(0, raw.find('#'));
    std::istringstream words(line);
    std::string host;
    if (!(words >> host)) continue;
    const std::string where = origin + ":" + std::to_string(number);
    SLUICE_CHECK(host.find('=') == std::string::npos, ConfigError,
                 "hostfile error: " << where << ": a line starts with the host name, got '" << host << "'");
    // A name goes to mpirun and ssh as an argument: one starting with '-'
    // would be read as an option (e.g. --oversubscribe).
    SLUICE_CHECK(host.front() != '-' && host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                                "0123456789.-_:[]") == std::string::npos,
                 ConfigError,
                 "hostfile error: " << where << ": '" << host << "' is not a host name (letters, digits, '.', '-', "
                                    << "'_', ':' and brackets, not starting with '-')");
    SLUICE_CHECK(seen.insert(host).second, ConfigError,
                 "hostfile error: " << where << ": host " << host << " is listed twice (give it one line with "
                                    << "all its slots)");
    HostSlots h{host, 1, number};
    int maxSlots = -1;
    std::set<std::string> given;  // keys on this line
    std::string word;
    while (words >> word) {
      const auto eq = word.find('=');
      const std::string key = word.substr(0, eq);
      SLUICE_CHECK(eq != std::string::npos && (key == "slots" || key == "max_slots"), ConfigError,
                   "hostfile error: " << where << ": unknown entry '" << word
                                      << "' (a line is: HOST [slots=N] [max_slots=M])");
      SLUICE_CHECK(given.insert(key).second, ConfigError,
                   "hostfile error: " << where << ": " << key << " is given twice for host " << host);
      const int n = parseCount(word.substr(eq + 1), where, key);
      SLUICE_CHECK(n <= kMaxSlots, ConfigError,
                   "hostfile error: " << where << ": " << key << "=" << n << " for host " << host << " is more than "
                                      << kMaxSlots << " ranks on one machine");
      if (key == "slots") h.slots = n;
      if (key == "max_slots") maxSlots = n;
    }
    SLUICE_CHECK(h.slots >= 1, ConfigError,
                 "hostfile error: " << where << ": slots must be >= 1 for host " << host << ", got " << h.slots);
    SLUICE_CHECK(maxSlots < 0 || maxSlots >= h.slots, ConfigError,
                 "hostfile error: " << where << ": max_slots (" << maxSlots << ") is below slots (" << h.slots
                                    << ") for host " << host);
    hosts.push_back(h);
  }
  SLUICE_CHECK(!hosts.empty(), ConfigError,
               "hostfile error: " << origin << " lists no hosts (expected lines like 'node1 slots=4')");
  return hosts;
}

std::vector<HostSlots> readHostfile(const std::string& path) {
  SLUICE_CHECK(std::filesystem::is_regular_file(path), ConfigError,
               "hostfile error: " << path << " does not exist or is not a file (cluster.hostfile or --hostfile)");
  return parseHostfile(readFile(path), path);
}

}  // namespace sluice
