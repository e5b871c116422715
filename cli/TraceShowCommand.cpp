// `sluice trace show TRACE -o SVG`: a run's (or a simulation's) timeline drawn.
#include "cli/Commands.h"

#include <iostream>

#include "core/Files.h"
#include "telemetry/TimelineSvg.h"

namespace sluice::cli {

int traceShowCommand(const CommandLine& a, int, char**) {
  sluice::SvgSize size;
  const std::string svg = sluice::timelineSvg(a.config, &size);
  sluice::writeFileAtomically(a.output, svg);
  std::cout << "wrote " << a.output << " (" << size.width << " x " << size.height << ")" << std::endl;
  return 0;
}

}  // namespace sluice::cli
