# kakeya — one Makefile.
#
#   make            build build/kakeya (and the engine library)
#   make test       unit + golden tests, then the same tests under ASan/UBSan,
#                   then a short fuzz run of the GGUF reader
#   make bench      speed benchmarks, JSON on stdout (BENCH_MODEL=... to pick)
#   make run        chat with the default model
#   make install    PREFIX=/usr/local DESTDIR=
#
# The engine is built for x86-64-v3 (AVX2, FMA, F16C): the floor the project
# supports. AVX-512 kernels live in files named *_avx512.c, compiled with
# those extensions and only called after a runtime CPU check; the AMX kernel
# (*_amx.c) likewise.

CC      ?= gcc
PREFIX  ?= /usr/local
BUILD   ?= build
SHARED  ?= ../shared

ARCH      := -march=x86-64-v3 -mtune=generic
AVX512    := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
AMX       := $(AVX512) -mamx-tile -mamx-int8
WARN      := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
PKGS      := ncursesw readline sqlite3 libcjson
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
CFLAGS    ?= -O2 -g
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) $(ARCH) -Iengine -Iengine/cpu \
             -Iengine/vulkan -I$(BUILD)/shaders \
             -Iapp -Iui -I/usr/include/cjson $(BLAS_CFLAGS) -MMD -MP \
             -DKAKEYA_PREFIX='"$(PREFIX)"' $(CFLAGS) $(SAN)
LDLIBS    = $(BLAS_LIBS) -lm -lpthread -ldl

ENGINE_SRC := $(wildcard engine/*.c engine/cpu/*.c engine/vulkan/*.c)
APP_SRC    := $(wildcard app/*.c ui/*.c)
TEST_SRC   := $(wildcard tests/test_*.c)
TESTLIB_SRC:= $(wildcard tests/lib/*.c)

ENGINE_OBJ := $(ENGINE_SRC:%.c=$(BUILD)/%.o)
APP_OBJ    := $(APP_SRC:%.c=$(BUILD)/%.o)
APPLIB_OBJ := $(filter-out $(BUILD)/app/main.o,$(APP_OBJ))
TESTLIB_OBJ:= $(TESTLIB_SRC:%.c=$(BUILD)/%.o)
TEST_BIN   := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
LIB        := $(BUILD)/libkakeya.a
APPLIB     := $(BUILD)/libkakeya-app.a
APP        := $(BUILD)/kakeya

.PHONY: all test test-plain test-asan fuzz fuzz-smoke bench eval-recall eval-models \
        run \
        install clean

all: $(APP)

$(BUILD)/%_amx.o: %_amx.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AMX) -c $< -o $@

$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX512) -c $< -o $@

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# ---- shaders: GLSL -> SPIR-V (glslc) -> linked into the binary ----
# matmul.comp is compiled eleven times per weight type: for GPUs matmul_<t>
# (batches of 16 tokens), matmul_t8_<t>, matmul_t8s2_<t> and matmul_t4_<t>
# (up to 16, 8 and 4: verify blocks; t8s2 and t4 on 2 rows a team) and
# matmul_one_<t> (decode); matmul_rows_<t> for CPU
# devices; matmul_one_norm_<t>, matmul_t4_norm_<t> and matmul_rows_norm_<t>
# as those forms with the RMSNorm of their input folded in; matmul_dec_<t>
# and matmul_dec_norm_<t>, decode on devices with 32-wide subgroups (the
# output matrix); matmul_mma64_q8_0, matmul_mma32_q8_0 and
# matmul_mma16_q8_0, prefill's Q8_0 products as int8 tiles of 64, 32 and
# 16 rows on devices with NVIDIA's cooperative matrices; matmul_qx1_q8_0,
# matmul_qx4_q8_0, matmul_qx8_q8_0 and matmul_qx8r2_q8_0 (and their _norm_
# forms), decode's and verify's Q8_0 products in packed int8 dot products. spirv.S pulls
# every .spv in with .incbin; shader_list.h names them for vk_shaders.c's
# table.
MATMUL_TYPES := f32 f16 bf16 q8_0 q4_0 q5_0 q4_k q6_k
MATMUL_FORMS := matmul_ matmul_t8_ matmul_t8s2_ matmul_t4_ matmul_one_ \
                matmul_rows_ matmul_one_norm_ matmul_t4_norm_ \
                matmul_rows_norm_ matmul_dec_ matmul_dec_norm_
SHADER_NAMES := $(foreach f,$(MATMUL_FORMS),$(MATMUL_TYPES:%=$(f)%)) \
                matmul_mma64_q8_0 matmul_mma32_q8_0 matmul_mma16_q8_0 \
                $(foreach n,1 4 8 8r2,matmul_qx$(n)_q8_0 matmul_qx$(n)_norm_q8_0) \
                rmsnorm rmsnorm_add rope add gated_act \
                kv_store rope_kv_store rope_kv_store_norm attention \
                attention_cpu attention_h2 attention_h4 attention_rope \
                attention_rope_h2 attention_rope_h4 \
                attention_rope_cpu \
                argmax sample
SPIRV      := $(SHADER_NAMES:%=$(BUILD)/shaders/%.spv)
SPIRV_OBJ  := $(BUILD)/shaders/spirv.o
GLSLC      ?= glslc
GLSL_FLAGS := --target-env=vulkan1.1 -O -Werror -Ishaders

$(BUILD)/shaders/matmul_rows_%.spv: shaders/matmul.comp $(wildcard shaders/*.glsl)
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSL_FLAGS) -DMM_ROWWISE -DWTYPE_$(shell echo $* | tr a-z A-Z) $< -o $@

# The forms that fold the RMSNorm before them into their input (-DMM_NORM;
# vk_matmul_forms' norm_prefix): the decode form, the 4-token one and the
# rowwise one.
# (Make takes the rule with the shortest stem, so these win over the
# plain forms' patterns.)
$(BUILD)/shaders/matmul_rows_norm_%.spv: shaders/matmul.comp $(wildcard shaders/*.glsl)
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSL_FLAGS) -DMM_ROWWISE -DMM_NORM \
	    -DWTYPE_$(shell echo $* | tr a-z A-Z) $< -o $@

# Tokens per workgroup (MM_NT), MM_PAIR, teams sharing an x tile
# (MM_TEAMS, MM_XT) and rows a team (MM_NS, default 4), as
# vk_matmul_forms in vk_shaders.c says (the teams and slots there must
# match). MATMUL_DEFS_ is the 16-token form's.
MATMUL_DEFS_one_ := -DMM_NT=1 -DMM_PAIR
MATMUL_DEFS_one_norm_ := -DMM_NT=1 -DMM_TEAMS=2 -DMM_XT=1 -DMM_NORM
MATMUL_DEFS_t4_ := -DMM_NT=4 -DMM_TEAMS=4 -DMM_XT=4 -DMM_NS=2
MATMUL_DEFS_t8_ := -DMM_NT=8 -DMM_TEAMS=4 -DMM_XT=4
MATMUL_DEFS_t8s2_ := $(MATMUL_DEFS_t8_) -DMM_NS=2
MATMUL_DEFS_t4_norm_ := $(MATMUL_DEFS_t4_) -DMM_NORM
MATMUL_DEFS_dec_ := -DMM_NT=1 -DMM_TEAMS=2 -DMM_DECODE
MATMUL_DEFS_dec_norm_ := $(MATMUL_DEFS_dec_) -DMM_NORM
MATMUL_DEFS_mma64_ := -DMM_NT=64 -DMM_TEAMS=4 -DMM_MMA -DMMA_BANDS=4
MATMUL_DEFS_mma32_ := -DMM_NT=64 -DMM_TEAMS=4 -DMM_MMA -DMMA_BANDS=2
MATMUL_DEFS_mma16_ := -DMM_NT=64 -DMM_TEAMS=4 -DMM_MMA -DMMA_BANDS=1
MATMUL_DEFS_qx1_ := -DMM_NT=1 -DMM_TEAMS=4 -DMM_QX
MATMUL_DEFS_qx4_ := -DMM_NT=4 -DMM_TEAMS=4 -DMM_QX
MATMUL_DEFS_qx8_ := -DMM_NT=8 -DMM_TEAMS=4 -DMM_QX
MATMUL_DEFS_qx8r2_ := -DMM_NT=8 -DMM_TEAMS=4 -DMM_QX -DQX_ROWS=2
MATMUL_DEFS_qx1_norm_ := $(MATMUL_DEFS_qx1_) -DMM_NORM
MATMUL_DEFS_qx4_norm_ := $(MATMUL_DEFS_qx4_) -DMM_NORM
MATMUL_DEFS_qx8_norm_ := $(MATMUL_DEFS_qx8_) -DMM_NORM
MATMUL_DEFS_qx8r2_norm_ := $(MATMUL_DEFS_qx8r2_) -DMM_NORM
MATMUL_DEFS_ :=
define MATMUL_FORM_RULE
$$(BUILD)/shaders/matmul_$(1)%.spv: shaders/matmul.comp $$(wildcard shaders/*.glsl) Makefile
	@mkdir -p $$(dir $$@)
	$$(GLSLC) $$(GLSL_FLAGS) $$(MATMUL_DEFS_$(1)) \
	    -DWTYPE_$$(shell echo $$* | tr a-z A-Z) $$< -o $$@
endef
$(foreach f,one_ one_norm_ t4_ t4_norm_ t8_ t8s2_ dec_ dec_norm_ \
    mma64_ mma32_ mma16_ \
    qx1_ qx4_ qx8_ qx8r2_ qx1_norm_ qx4_norm_ qx8_norm_ qx8r2_norm_,\
    $(eval $(call MATMUL_FORM_RULE,$(f))))

$(BUILD)/shaders/matmul_%.spv: shaders/matmul.comp $(wildcard shaders/*.glsl) Makefile
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSL_FLAGS) $(MATMUL_DEFS_) \
	    -DWTYPE_$(shell echo $* | tr a-z A-Z) $< -o $@

# Attention for CPU-backed devices: workgroups of 64 (attention.comp says
# why).
$(BUILD)/shaders/attention_cpu.spv: shaders/attention.comp $(wildcard shaders/*.glsl) Makefile
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSL_FLAGS) -DATT_WG=64 $< -o $@

# Attention for 2 or 4 query heads of a kv head a workgroup.
$(BUILD)/shaders/attention_h%.spv: shaders/attention.comp $(wildcard shaders/*.glsl) Makefile
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSL_FLAGS) -DATT_HEADS=$* $< -o $@

# Attention that rotates and stores the batch's keys itself (-DATT_ROPE:
# rope_kv_store's work, one dispatch fewer a layer), in both sizes.
$(BUILD)/shaders/attention_rope.spv: shaders/attention.comp $(wildcard shaders/*.glsl) Makefile
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSL_FLAGS) -DATT_ROPE $< -o $@

$(BUILD)/shaders/attention_rope_cpu.spv: shaders/attention.comp $(wildcard shaders/*.glsl) Makefile
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSL_FLAGS) -DATT_ROPE -DATT_WG=64 $< -o $@

# attention_rope for 2 or 4 query heads of a kv head a workgroup (each key
# and value loaded once for all of them).
$(BUILD)/shaders/attention_rope_h%.spv: shaders/attention.comp $(wildcard shaders/*.glsl) Makefile
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSL_FLAGS) -DATT_ROPE -DATT_HEADS=$* $< -o $@

# rmsnorm that adds its output to a second row (a post-norm's block
# output), and rope_kv_store that norms each head first (q/k norms).
$(BUILD)/shaders/rmsnorm_add.spv: shaders/rmsnorm.comp $(wildcard shaders/*.glsl) Makefile
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSL_FLAGS) -DNORM_ADD $< -o $@

$(BUILD)/shaders/rope_kv_store_norm.spv: shaders/rope_kv_store.comp $(wildcard shaders/*.glsl) Makefile
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSL_FLAGS) -DQK_NORM $< -o $@

$(BUILD)/shaders/%.spv: shaders/%.comp $(wildcard shaders/*.glsl)
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSL_FLAGS) $< -o $@

$(BUILD)/shaders/shader_list.h: Makefile
	@mkdir -p $(dir $@)
	printf 'SHADER(%s)\n' $(SHADER_NAMES) > $@

$(BUILD)/shaders/spirv.S: Makefile
	@mkdir -p $(dir $@)
	{ echo '.section .rodata'; \
	  for n in $(SHADER_NAMES); do \
	    printf '.global kk_spv_%s\n.global kk_spv_%s_end\n.balign 4\nkk_spv_%s:\n.incbin "%s"\nkk_spv_%s_end:\n' \
	        $$n $$n $$n $(BUILD)/shaders/$$n.spv $$n; \
	  done; \
	  echo '.section .note.GNU-stack,"",@progbits'; } > $@

$(SPIRV_OBJ): $(BUILD)/shaders/spirv.S $(SPIRV)
	$(CC) -c $< -o $@

$(BUILD)/engine/vulkan/vk_shaders.o: $(BUILD)/shaders/shader_list.h

$(LIB): $(ENGINE_OBJ) $(SPIRV_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^


# Everything of the app but main(), so tests can link the store, the UI...
$(APPLIB): $(APPLIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(APP): $(BUILD)/app/main.o $(APPLIB) $(LIB)
	$(CC) $(ALL_CFLAGS) -o $@ $(BUILD)/app/main.o $(APPLIB) $(LIB) \
	    $(shell pkg-config --libs $(PKGS)) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(TESTLIB_OBJ) $(APPLIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/lib -o $@ $< $(TESTLIB_OBJ) $(APPLIB) $(LIB) \
	    -lcmocka $(shell pkg-config --libs $(PKGS)) $(LDLIBS)

# Tests run from the repository root; they find the golden data in $(SHARED).
# The stages run one after the other; each adds its counts to
# build/test-summary and the last line is the total.
SUMMARY := $(CURDIR)/build/test-summary
test:
	@mkdir -p build && rm -f $(SUMMARY)
	$(MAKE) test-plain
	$(MAKE) fuzz-smoke
	$(MAKE) test-asan
	@awk '{p += $$1; f += $$3} END {printf "total: %d passed, %d failed\n", p, f; exit f > 0}' $(SUMMARY)

test-plain: $(TEST_BIN) $(APP)
	KK_SHARED=$(SHARED) KK_BIN=$(APP) KK_SUMMARY=$(SUMMARY) \
	    tests/run-tests.sh $(TEST_BIN)

test-asan:
	$(MAKE) BUILD=build/asan CFLAGS="-O1 -g -fno-omit-frame-pointer" \
	    SAN="-fsanitize=address,undefined -fno-sanitize-recover=all" test-plain

# libFuzzer needs clang. The fuzz target links the reader on its own.
FUZZ_BIN := $(BUILD)/fuzz/fuzz_gguf
$(FUZZ_BIN): tests/fuzz/fuzz_gguf.c engine/gguf.c engine/dtype.c engine/error.c
	@mkdir -p $(dir $@)
	clang -std=c11 -D_GNU_SOURCE -g -O1 -Iengine \
	    -fsanitize=fuzzer,address,undefined -o $@ $^

fuzz: $(FUZZ_BIN)
	@mkdir -p $(BUILD)/fuzz/corpus
	$(FUZZ_BIN) -max_len=65536 $(BUILD)/fuzz/corpus tests/fuzz/seeds

fuzz-smoke: $(FUZZ_BIN)
	@mkdir -p $(BUILD)/fuzz/corpus
	$(FUZZ_BIN) -max_total_time=$${FUZZ_SECONDS:-60} -max_len=65536 \
	    $(BUILD)/fuzz/corpus tests/fuzz/seeds

# The default benchmark model: a random-weight SmolLM2-360M in Q8_0 (about
# 380 MiB, far larger than any cache), made once by kakeya mkmodel.
BENCH_SHAPE ?= smollm2-360m
BENCH_TYPE  ?= Q8_0
BENCH_MODEL ?= $(BUILD)/models/$(BENCH_SHAPE)-$(BENCH_TYPE).gguf
BENCH_THREADS ?= 2
# cpu, vulkan or auto (kakeya info --devices lists the Vulkan devices).
BENCH_BACKEND ?= cpu
$(BUILD)/models/$(BENCH_SHAPE)-$(BENCH_TYPE).gguf: | $(APP)
	@mkdir -p $(dir $@)
	$(APP) mkmodel --shape $(BENCH_SHAPE) --type $(BENCH_TYPE) -o $@

# The speculative section runs the default models on the held-out prompts.
SPEC_MODEL ?= data/models/kakeya-chat.gguf
SPEC_DRAFT ?= data/models/kakeya-draft.gguf
bench: $(APP) $(BENCH_MODEL)
	$(APP) bench -m $(BENCH_MODEL) --threads $(BENCH_THREADS) \
	    --backend $(BENCH_BACKEND) \
	    $(if $(wildcard $(SPEC_MODEL)),--spec-model $(SPEC_MODEL)) \
	    $(if $(wildcard $(SPEC_DRAFT)),--draft $(SPEC_DRAFT))
	$(if $(wildcard $(SPEC_MODEL)),$(APP) bench --resume --spec-model $(SPEC_MODEL))

# Long-document recall per KV policy: the default model, and the golden
# gemma3 model (random weights: only agreement with the full cache counts).
GOLDEN_GEMMA3 := $(SHARED)/golden/models/gemma3-f32.gguf
eval-recall: $(APP)
	$(if $(wildcard $(SPEC_MODEL)),$(APP) eval-recall -m $(SPEC_MODEL))
	$(if $(wildcard $(GOLDEN_GEMMA3)),$(APP) eval-recall -m $(GOLDEN_GEMMA3))

# The default models on their held-out test sets, on the CPU, through
# kakeya's own engine: exact match per set (kakeya ask), then tau and speed
# of the draft at a fixed block of 8 against plain decoding (bench).
eval-models: $(APP)
	python3 tools/train/kakeya_eval.py --per-set 20
	$(APP) bench --spec-model $(SPEC_MODEL) --draft $(SPEC_DRAFT) --block 8

run: $(APP)
	$(APP)

install: $(APP)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	    $(DESTDIR)$(PREFIX)/share/kakeya/models
	install -m 755 $(APP) $(DESTDIR)$(PREFIX)/bin/kakeya
	install -m 644 man/kakeya.1 $(DESTDIR)$(PREFIX)/share/man/man1/kakeya.1
	for f in data/models/*.gguf; do [ -f "$$f" ] && \
	    install -m 644 "$$f" $(DESTDIR)$(PREFIX)/share/kakeya/models/; done; true

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
