//===- TrellisRun.cpp - Trains a compiled plan ----------------------------===//
//
// `trellis-run`: the runtime's own tool, built by the runtime project alone
// (no MLIR, no LLVM). `trellis run ARGS` executes `trellis-run ARGS`, and
// the launcher starts every rank as this program.
//
//===----------------------------------------------------------------------===//

#include "trellis/Common/FileKind.h"
#include "trellis/Runtime/TrainOptionTable.h"
#include "trellis/Runtime/Trainer.h"

#include <CLI/CLI.hpp>

#include <sys/resource.h>

#include <charconv>
#include <cstdio>
#include <new>

namespace {

using trellis::OptionRow;
using trellis::OptionType;
using trellis::OptionValue;
using trellis::runtime::TrainOptions;

/// A flag taking a value of type T, which `store` puts into an OptionValue
/// for `apply`.
template <typename T, typename Apply>
CLI::Option *addValueFlag(CLI::App &app, const std::string &name,
                          const char *help, Apply apply,
                          void (*store)(OptionValue &, const T &)) {
  return app.add_option_function<T>(
      name,
      [apply, store](const T &given) {
        OptionValue value;
        store(value, given);
        apply(value);
      },
      help);
}

/// The flag of `row`, setting `options` when given; a value the row's check
/// refuses is kept in `refused` (the first one) and not set.
CLI::Option *addFlag(CLI::App &app, const OptionRow<TrainOptions> &row,
                     TrainOptions &options, std::string &refused) {
  std::string name = std::string("--") + row.name;
  auto apply = [&row, &options, &refused](const OptionValue &value) {
    std::string problem = row.check ? row.check(value) : "";
    if (problem.empty())
      row.set(options, value);
    else if (refused.empty())
      refused = problem;
  };
  switch (row.type) {
  case OptionType::Int:
    // Read as text and converted here: a value past int64's range is
    // refused, never clamped (CLI11 would saturate 2^64 to 2^63 - 1).
    return app
        .add_option_function<std::string>(
            name,
            [apply, name, &refused](const std::string &given) {
              OptionValue value;
              const char *end = given.data() + given.size();
              auto [stop, error] =
                  std::from_chars(given.data(), end, value.integer);
              if (error != std::errc() || stop != end || given.empty()) {
                if (refused.empty())
                  refused = std::string("expected a number") +
                            (error == std::errc::result_out_of_range
                                 ? " in [-2^63, 2^63)"
                                 : "") +
                            " for " + name + ", found '" + given +
                            "' (see 'trellis run --help')";
                return;
              }
              apply(value);
            },
            row.help)
        ->type_name("INT");
  case OptionType::Double:
    return addValueFlag<double>(
        app, name, row.help, apply,
        [](OptionValue &value, const double &given) { value.number = given; });
  case OptionType::String:
    return addValueFlag<std::string>(
        app, name, row.help, apply,
        [](OptionValue &value, const std::string &given) {
          value.text = given;
        });
  case OptionType::Bool:
    if (row.switchOnly)
      return app.add_flag_function(
          name,
          [apply](int64_t count) {
            OptionValue value;
            value.flag = count > 0;
            apply(value);
          },
          row.help);
    return addValueFlag<bool>(
        app, name, row.help, apply,
        [](OptionValue &value, const bool &given) { value.flag = given; });
  }
  return nullptr;
}

} // namespace

int main(int argc, char **argv) {
  TrainOptions options;
  const TrainOptions defaults;
  std::string refused;
  CLI::App app("Trains a compiled plan (one process per rank)", "trellis run");
  app.add_option("plan", options.planPath, "The plan file")->required();
  for (const OptionRow<TrainOptions> &row :
       trellis::runtime::trainOptionTable()) {
    if (!(row.scopes & trellis::kOptionOnCommandLine))
      continue;
    CLI::Option *flag = addFlag(app, row, options, refused);
    flag->group(row.group);
    if (row.get) {
      std::string shown =
          trellis::formatOptionValue(row.type, row.get(defaults));
      if (!shown.empty())
        flag->default_str(shown);
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ConversionError &error) {
    // CLI11 says "Could not convert: --steps = many".
    std::string text = error.what();
    size_t colon = text.find(": "), equals = text.find(" = ");
    if (colon != std::string::npos && equals != std::string::npos &&
        equals > colon) {
      std::string name = text.substr(colon + 2, equals - colon - 2);
      const CLI::Option *option = app.get_option_no_throw(name);
      bool flag = option && option->get_type_name() == "BOOLEAN";
      text = std::string("expected ") + (flag ? "true or false" : "a number") +
             " for " + name + ", found '" + text.substr(equals + 3) + "'";
    }
    std::fprintf(stderr, "trellis run: error: %s (see 'trellis run --help')\n",
                 text.c_str());
    return 1;
  } catch (const CLI::ParseError &error) {
    std::fprintf(stderr, "trellis run: error: %s (see 'trellis run --help')\n",
                 error.what());
    return 1;
  }
  if (!refused.empty()) {
    std::fprintf(stderr, "trellis run: error: %s\n", refused.c_str());
    return 1;
  }
  options.command.assign(argv, argv + argc);
  try {
    return trellis::runtime::runTrainingCommand(options);
  } catch (const std::bad_alloc &) {
    // What no check could foresee (the loaders and the memory plan refuse
    // what they can count) is still an error, not an abort.
    std::string limit;
    struct rlimit space;
    if (getrlimit(RLIMIT_AS, &space) == 0 && space.rlim_cur != RLIM_INFINITY)
      limit = " (ulimit -v (RLIMIT_AS) allows this process " +
              trellis::formatBytes(static_cast<int64_t>(space.rlim_cur)) + ")";
    std::fprintf(stderr,
                 "trellis run: error: out of memory: an allocation of host "
                 "memory failed%s\n",
                 limit.c_str());
    return 1;
  }
}
