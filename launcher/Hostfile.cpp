#include "launcher/Hostfile.h"

#include <filesystem>
#include <set>
#include <sstream>

#include "core/Error.h"
#include "core/Files.h"

namespace sluice {
namespace {

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
    SLUICE_CHECK(seen.insert(host).second, ConfigError,
                 "hostfile error: " << where << ": host " << host << " is listed twice (give it one line with "
                                    << "all its slots)");
    HostSlots h{host, 1, number};
    int maxSlots = -1;
    std::string word;
    while (words >> word) {
      const auto eq = word.find('=');
      const std::string key = word.substr(0, eq);
      SLUICE_CHECK(eq != std::string::npos && (key == "slots" || key == "max_slots"), ConfigError,
                   "hostfile error: " << where << ": unknown entry '" << word
                                      << "' (a line is: HOST [slots=N] [max_slots=M])");
      const int n = parseCount(word.substr(eq + 1), where, key);
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
