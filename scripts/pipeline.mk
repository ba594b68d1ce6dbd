# The pipeline as make rules: each stage's file is built from the previous
# one, so changing one stage's flags re-runs only that stage and the ones
# after it. The passes and their order come from passes/pipeline/PIPELINE.
#
#   make -f scripts/pipeline.mk OUT=out/vit MODEL="--preset=vit-b16-224"
#   make -f scripts/pipeline.mk OUT=out/vit EXPAND_REDUCE_FLAGS=--partials-per-epoch=1
#   make -f scripts/pipeline.mk OUT=out/vit simulate
#
# Variables: OUT (default out/pipeline), MODEL (import-model flags), TARGET
# (default ipu21), <PASS>_FLAGS per pass (PLAN_OWNERSHIP_FLAGS, ...; the
# pass name in capitals with '-' as '_'), SIMULATE_FLAGS. Stage files are
# $(OUT)/0-import.tilec and $(OUT)/<i>-<pass>.tilec, each with its dump-ir
# text (.txt) and the flags it was made with (.flags). Run from the
# repository's top directory; tools are built with bazel first.

OUT ?= out/pipeline
MODEL ?=
TARGET ?= ipu21
SIMULATE_FLAGS ?=
BIN := bazel-bin/tools
PASSES := $(shell sed -e 's/\#.*//' -e '/^[[:space:]]*$$/d' passes/pipeline/PIPELINE)
INDICES := $(shell seq 1 $(words $(PASSES)))
# The planner's prices, handed from pass to pass as scripts/compile.sh
# hands them (docs/planner.md, "Price cache"): a stage's file is the same
# with or without them, so the cache is no prerequisite of any stage.
PRICE_CACHE := $(shell bash -c '. scripts/lib/pipeline.sh && tilec_price_cache "$(OUT)"')

flags_var = $(shell printf '%s' '$(1)' | tr 'a-z-' 'A-Z_')_FLAGS
stage = $(OUT)/$(1)-$(word $(1),$(PASSES))
previous = $(if $(filter 1,$(1)),$(OUT)/0-import,$(call stage,$(shell expr $(1) - 1)))
LAST := $(call stage,$(words $(PASSES)))

.PHONY: all simulate tools FORCE
all: $(LAST).tilec $(LAST).txt
simulate: $(OUT)/simulate.txt

tools:
	@bazel build --noshow_progress --ui_event_filters=-info //tools/...

# A .flags file changes only when its contents do, so a stage re-runs when
# its flags change and not otherwise.
$(OUT)/%.flags: FORCE | $(OUT)
	@printf '%s\n' '$(FLAGS_$*)' | cmp -s - $@ || printf '%s\n' '$(FLAGS_$*)' > $@

$(OUT):
	@mkdir -p $@

FLAGS_0-import := --target=$(TARGET) $(MODEL)
$(OUT)/0-import.tilec: $(OUT)/0-import.flags $(BIN)/import-model/import-model | tools
	$(BIN)/import-model/import-model $(FLAGS_0-import) -o $@

define PASS_RULES
FLAGS_$(1)-$(2) := $$($(call flags_var,$(2)))
$(call stage,$(1)).tilec: $(call previous,$(1)).tilec $(OUT)/$(1)-$(2).flags $(BIN)/$(2)/$(2) | tools
	$(BIN)/$(2)/$(2) $$(FLAGS_$(1)-$(2)) --price_cache=$(PRICE_CACHE) $$< -o $$@
endef
$(foreach i,$(INDICES),$(eval $(call PASS_RULES,$(i),$(word $(i),$(PASSES)))))

%.txt: %.tilec
	$(BIN)/dump-ir/dump-ir $< -o $@

$(OUT)/simulate.txt: $(LAST).tilec $(BIN)/simulate-device/simulate-device | tools
	$(BIN)/simulate-device/simulate-device $(SIMULATE_FLAGS) $< -o $@

# Binaries are made by the tools target (bazel decides what to rebuild).
$(BIN)/%:
	@bazel build --noshow_progress --ui_event_filters=-info //tools/...
