// Mutants: deliberately broken variants of the code, each breaking one guarantee, so that the
// randomized tests can be shown to catch such a bug (tests/mutants.sh). A mutant is compiled in
// only by a `--config=mutants` or `--config=asan` build (which define FARM_MUTANTS) and is
// switched on at run time by the environment variable FARM_MUTANT=<name>, which node processes
// inherit from the test:
//
//   if (FARM_MUTANT("skip_validate")) return absl::OkStatus();  // in Transaction::Validate
//
//   bazel test --config=mutants --test_env=FARM_MUTANT=skip_validate //tests:txn_history_test
//
// In every other build FARM_MUTANT(name) is the constant false: the broken branch is dead code
// the compiler removes, and nothing reads the environment.
//
// Thread safety: MutantActive may be called from any thread (the variable is read once).
#ifndef FARM_PLATFORM_MUTANT_H_
#define FARM_PLATFORM_MUTANT_H_

#ifdef FARM_MUTANTS
#include <cstdlib>
#include <cstring>

namespace farm {

// Whether FARM_MUTANT names `name` (one name, or several separated by commas).
inline bool MutantActive(const char* name) {
  static const char* const chosen = std::getenv("FARM_MUTANT");
  if (chosen == nullptr) return false;
  const size_t n = std::strlen(name);
  for (const char* p = chosen; *p != '\0';) {
    const char* end = std::strchr(p, ',');
    const size_t len = end == nullptr ? std::strlen(p) : static_cast<size_t>(end - p);
    if (len == n && std::strncmp(p, name, n) == 0) return true;
    if (end == nullptr) break;
    p = end + 1;
  }
  return false;
}

}  // namespace farm

#define FARM_MUTANT(name) (::farm::MutantActive(name))
#else
#define FARM_MUTANT(name) false
#endif

#endif  // FARM_PLATFORM_MUTANT_H_
