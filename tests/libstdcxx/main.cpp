// Prints what both libraries format; a mixed runtime crashed at this point.
#include <cstdio>
#include <string>

std::string second_text(long value);

int main() {
  std::printf("%s\n", second_text(42).c_str());
  return second_text(7) == "first 7, second 7 0.5" ? 0 : 1;
}
