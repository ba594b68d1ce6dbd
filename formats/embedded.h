#ifndef TILEC_FORMATS_EMBEDDED_H_
#define TILEC_FORMATS_EMBEDDED_H_

namespace tilec::ir {

// Files built into the binary by formats/embed.sh: the schema text and the
// target presets.
struct EmbeddedFile {
  const char* name;
  const char* text;
};

extern const EmbeddedFile kEmbeddedFiles[];
extern const int kEmbeddedFileCount;

}  // namespace tilec::ir

#endif  // TILEC_FORMATS_EMBEDDED_H_
