#ifndef TILEC_FORMATS_IR_H_
#define TILEC_FORMATS_IR_H_

// The IR library: read (path or "-"), verify, migrate and write (atomically)
// tilec modules, and load target descriptions. Every failure is a Status
// whose message is one line naming the file and the problem.

#include <cstdint>
#include <string>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::ir {

// The version this build writes. Bump it for every semantic change and add a
// migration step in migrate.cc (formats/README.md).
inline constexpr uint32_t kSchemaVersion = 1;
inline constexpr uint32_t kOldestReadableVersion = 1;
inline constexpr char kFileIdentifier[] = "TLC1";

// "-" means stdin / stdout.
Status ReadFile(const std::string& path, std::string* bytes);
// Writes to a temporary file beside `path`, then renames it over `path`, so
// a failed run never leaves a truncated file. "-" writes stdout.
Status WriteFileAtomically(const std::string& path, const std::string& bytes);

// Identifier, FlatBuffers verifier, schema version (older versions are
// migrated, newer ones refused), then the structural checks of VerifyModule.
// `name` is used in messages (a path, or "<stdin>").
Status ParseModule(const std::string& bytes, const std::string& name,
                   fb::ModuleT* module);
Status ReadModule(const std::string& path, fb::ModuleT* module);

// Structural checks: unique ids, operands defined before use, results
// defined once, shapes consistent with op kinds, ownerships well formed.
Status VerifyModule(const fb::ModuleT& module);

// Stamps the schema version and producer, verifies, serializes.
Status SerializeModule(fb::ModuleT module, const std::string& producer,
                       std::string* bytes);
Status WriteModule(const fb::ModuleT& module, const std::string& producer,
                   const std::string& path);

// JSON through the schema (the same field names as tilec.fbs).
Status ModuleToJson(const std::string& bytes, std::string* json);
Status ModuleFromJson(const std::string& json, const std::string& name,
                      std::string* bytes);

// A preset name ("ipu21", "tiny") or a path to a JSON file in the Target
// table's form.
Status LoadTarget(const std::string& name_or_path, fb::TargetT* target);
Status ParseTargetJson(const std::string& json, const std::string& name,
                       fb::TargetT* target);

// The schema text built into the binary.
const char* SchemaText();

// Upgrades a module read from an older schema version in place.
Status MigrateModule(uint32_t from_version, fb::ModuleT* module);

std::string DisplayName(const std::string& path);

}  // namespace tilec::ir

#endif  // TILEC_FORMATS_IR_H_
