// The first library: the one a static libstdc++ lands in (the linker meets it first).
#include <sstream>
#include <string>

std::string first_text(long value) {
  std::ostringstream out;
  out << "first " << value;
  return out.str();
}
