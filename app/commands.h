/* commands.h — the subcommands of the kakeya binary. Each takes the
 * arguments after its name and returns the process exit status (0 ok,
 * 1 failure, 2 usage error). */
#ifndef KK_COMMANDS_H
#define KK_COMMANDS_H

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_search(int argc, char **argv);
int cmd_eval_recall(int argc, char **argv);
int cmd_ask(int argc, char **argv);

#endif
