/* main.c — the kakeya binary: picks the subcommand. */
#include <stdio.h>
#include <string.h>

#include "chat.h"
#include "commands.h"

static const char usage[] =
    "usage: kakeya [--model F] [--draft F] [--db F] [--doc FILE] [--threads N]\n"
    "              [--ctx N] [--n-predict N] [--checkpoint-budget MIB]\n"
    "              [--backend cpu|vulkan|auto] [--device N]\n"
    "                                            the interactive chat\n"
    "       kakeya COMMAND [options]\n"
    "\n"
    "  run       -m MODEL.gguf -p PROMPT [-n N] [--greedy | --temp T --top-p P\n"
    "            --seed S] [--threads N] [--ctx N] [--chat] [--special] [--ids]\n"
    "            [--ignore-eos] [--backend cpu|vulkan|auto] [--device N]\n"
    "            [--draft F] [--spec auto|draft|ngram|off] [--block L]\n"
    "            [--kv f16|f32|q8_0] [--kv-window N --kv-sinks N] [--kv-full]\n"
    "            [--overflow refuse|sink]\n"
    "                              stream a completion to stdout\n"
    "  info      MODEL.gguf [--tensors]   architecture, sizes, types, template\n"
    "  info      --devices                the Vulkan devices --device picks\n"
    "  tokenize  -m MODEL.gguf [--no-bos] [--special] [--pieces] TEXT\n"
    "  mkmodel   --shape NAME --type F16|Q8_0|Q4_0 -o FILE [--vocab-from GGUF]\n"
    "            [--seed S] | --list   random weights, real shapes\n"
    "  bench     -m MODEL.gguf [--threads N] [--quick]   speed, as JSON\n"
    "            [--backend B] [--device N] [--bandwidth GBS] [--context N]\n"
    "            [--kv f16|f32|q8_0]\n"
    "            --resume [--spec-model MODEL.gguf]   checkpoint resume vs\n"
    "            recompute over a 2,000-token document\n"
    "  list      [--db FILE]                 stored conversations\n"
    "  export    ID [--format md|json] [-o FILE] [--db FILE]\n"
    "  import    FILE.json|- [--db FILE]\n"
    "  search    TEXT... [--limit N] [--db FILE]   full-text search\n"
    "  ask       [-c ID] [--model F] [--db F] QUESTION [< DOCUMENT]\n"
    "            one stored turn, answer on stdout, conversation id on stderr\n"
    "  eval-recall -m MODEL.gguf [--needles FILE]  long-document recall\n"
    "            per KV-cache policy\n"
    "\n"
    "See kakeya(1) for details.\n";

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } commands[] = {
        {"run", cmd_run},         {"info", cmd_info},
        {"tokenize", cmd_tokenize}, {"mkmodel", cmd_mkmodel},
        {"bench", cmd_bench},     {"list", cmd_list},
        {"export", cmd_export},   {"import", cmd_import},
        {"search", cmd_search},   {"uibench", chat_uibench},
        {"eval-recall", cmd_eval_recall}, {"ask", cmd_ask},
    };
    /* No subcommand (or only options): the interactive chat. */
    if (argc < 2 || (argv[1][0] == '-' && strcmp(argv[1], "--help") &&
                     strcmp(argv[1], "-h")))
        return chat_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage, stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "kakeya: unknown command '%s'\n\n%s", argv[1], usage);
    return 2;
}
