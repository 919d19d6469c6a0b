// Message helpers for rotary::error: every message names the argument and shows its value.
#ifndef ROTARY_DETAIL_FORMAT_HPP
#define ROTARY_DETAIL_FORMAT_HPP

#include "guard.hpp"

#include <sstream>
#include <string>

namespace rotary::detail {

// Out of line (ROTARY_COLD): only failed checks build a message.
template <class... Parts>
ROTARY_COLD std::string concat(const Parts&... parts) {
  std::ostringstream os;
  os.precision(17);
  (os << ... << parts);
  return os.str();
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_FORMAT_HPP
