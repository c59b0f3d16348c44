// Another C++ runtime in the process: a library linked with a static
// libstdc++ and libgcc, exporting every symbol it took from them, as
// extensions built with such toolchains do. Loaded with RTLD_GLOBAL before
// torch, its copies of std::exception's vtable, typeinfo and the locale
// facets come first in lookup order for every library loaded after it
// (test/test_import_hook.py, Note [One C++ runtime per process]).

#include <locale>
#include <sstream>
#include <stdexcept>
#include <string>
#include <typeinfo>

extern "C" __attribute__((visibility("default"))) int
adl_other_cxx_runtime_round_trip(int value) {
  try {
    std::ostringstream out;
    out.imbue(std::locale::classic());
    out << value;
    throw std::runtime_error(out.str());
  } catch (const std::exception& e) {
    return typeid(e) == typeid(std::runtime_error) ? std::stoi(e.what()) : -1;
  }
}
