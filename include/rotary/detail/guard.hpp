// Private headers include this first: they are parts of the public headers, not entry points.
#ifndef ROTARY_CONFIG_HPP
#error "rotary/detail/* is private: include <rotary/rotary.hpp> or a public rotary header instead"
#endif
