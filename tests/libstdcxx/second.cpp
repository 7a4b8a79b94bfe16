// The second library formats numbers itself, as libcirclerope_kernels.so's errors do.
#include <sstream>
#include <string>

std::string first_text(long value);

std::string second_text(long value) {
  std::ostringstream out;
  out.precision(10);
  out << first_text(value) << ", second " << value << " " << 0.5f;
  return out.str();
}
