/* test_checkpoint.c — restored-context checkpoints end to end: the engine
 * thread saves its session after a turn, the store keeps it in a real
 * database file, a fresh engine (as in a new process) restores it and
 * computes only the new tokens, with the same answer as an uninterrupted
 * run; checkpoints of other model files or damaged ones are refused with a
 * note and the context is recomputed. Also `kakeya ask` through the real
 * binary ($KK_BIN). Golden models come from the shared folder; without it
 * the tests skip loudly. */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "checkpoint.h"
#include "engine_thread.h"
#include "kakeya.h"
#include "store_testutil.h"

static const char model_rel[] = "golden/models/llama256-Q8_0.gguf";
/* Other model files with the same tokenizer: the token ids of its
 * checkpoint match the prompt, so only the fingerprint tells them apart. */
static const char other_rel[] = "golden/models/llama256-f32.gguf";

static const char question2[] = "And what does the second paragraph say?";

/* A user message of a few hundred tokens: the "document" turn. */
static char *long_message(void)
{
    static const char para[] =
        "Checkpoints keep the key and value cache of a conversation so that "
        "reopening it does not recompute the document. ";
    size_t n = 6, len = strlen(para);
    char *s = malloc(n * len + 64);
    assert_non_null(s);
    strcpy(s, "Please read this: ");
    for (size_t i = 0; i < n; i++)
        strcat(s, para);
    return s;
}

/* ---- driving the engine thread ---- */

struct outcome {
    char text[8192];
    size_t len;
    struct kk_stats stats;
    int restored;            /* RESUME: tokens restored */
    bool refused;            /* RESUME with done 0 */
    char note[512];
    struct engine_checkpoint checkpoint;   /* CHECKPOINT, owned */
    bool has_checkpoint;
};

static struct engine_thread *start_engine(const char *model_path)
{
    struct engine_config cfg = {.model_path = model_path, .n_ctx = 512,
                                .n_threads = 1, .n_predict = 12};
    struct engine_thread *e = NULL;
    struct kk_error err = {{0}};
    if (engine_thread_start(&cfg, &e, &err))
        fail_msg("engine_thread_start: %s", err.msg);
    return e;
}

static void apply(struct outcome *o, uint64_t id, struct engine_event *ev,
                  bool *done)
{
    if (ev->kind == ENGINE_EVENT_ERROR)
        fail_msg("engine error: %s", ev->err.msg);
    if (ev->request_id != id)
        return;   /* READY */
    switch (ev->kind) {
    case ENGINE_EVENT_TOKEN: {
        size_t n = strlen(ev->text);
        assert_true(o->len + n < sizeof o->text);
        memcpy(o->text + o->len, ev->text, n + 1);
        o->len += n;
        break;
    }
    case ENGINE_EVENT_RESUME:
        o->restored = ev->done;
        o->refused = ev->done == 0;
        snprintf(o->note, sizeof o->note, "%s", ev->text);
        break;
    case ENGINE_EVENT_DONE:
        o->stats = ev->stats;
        *done = true;
        break;
    case ENGINE_EVENT_CHECKPOINT:
        o->checkpoint = ev->checkpoint;
        memset(&ev->checkpoint, 0, sizeof ev->checkpoint);
        o->has_checkpoint = true;
        break;
    default:
        break;
    }
}

/* Runs one request to its end (and, with want_checkpoint, until its
 * checkpoint arrives). roles alternate user/assistant from "user". */
static void run(struct engine_thread *e, enum engine_request_kind kind,
                const char *const *contents, size_t n, int64_t conv,
                struct engine_checkpoint *restore, bool want_checkpoint,
                struct outcome *o)
{
    static const char *const roles[] = {"user", "assistant", "user",
                                        "assistant"};
    memset(o, 0, sizeof *o);
    uint64_t id = engine_thread_submit(e, kind, roles, contents, n, conv,
                                       restore);
    assert_true(id > 0);
    bool done = false;
    for (int waited = 0; !(done && (!want_checkpoint || o->has_checkpoint));) {
        struct pollfd p = {.fd = engine_thread_fd(e), .events = POLLIN};
        int r = poll(&p, 1, 1000);
        if (r == 0 && ++waited > 120)
            fail_msg("no answer from the engine thread in 120 s");
        struct engine_event ev;
        while (engine_thread_poll(e, &ev)) {
            apply(o, id, &ev, &done);
            engine_event_free(&ev);
        }
    }
}

/* Token count of the conversation as the engine renders it, and how many
 * leading tokens it shares with ids. */
static int render_count(const char *model_path, const char *const *contents,
                        size_t n, const int32_t *ids, size_t n_ids,
                        int *common)
{
    static const char *const roles[] = {"user", "assistant", "user"};
    struct kk_model *m = NULL;
    struct kk_error err = {{0}};
    assert_int_equal(kk_model_open(model_path, &m, &err), 0);
    char *text = kk_chat_render(m, roles, contents, n, true);
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    int32_t buf[2048];
    int count = kk_tokenize(m, text, strlen(text), info.add_bos, true, buf,
                            2048, &err);
    assert_true(count > 0 && count <= 2048);
    *common = 0;
    while ((size_t)*common < n_ids && *common < count &&
           buf[*common] == ids[*common])
        (*common)++;
    free(text);
    kk_model_close(m);
    return count;
}

static char *golden_path(const char *rel)
{
    const char *p = testutil_shared_path(rel);
    if (!p)
        return NULL;
    char *copy = strdup(p);
    assert_non_null(copy);
    return copy;
}

static int64_t new_conversation(struct store *s)
{
    int64_t id;
    struct kk_error err = {{0}};
    assert_int_equal(store_create_conversation(s, "t", "", "m", "", &id, &err),
                     0);
    return id;
}

static void store_outcome_checkpoint(struct store *s, struct outcome *o,
                                     uint64_t budget)
{
    struct kk_error err = {{0}};
    struct engine_checkpoint *c = &o->checkpoint;
    assert_true(o->has_checkpoint);
    if (checkpoint_store(s, c->conversation_id, c->fingerprint, c->token_ids,
                         c->n_tokens, c->blob, c->bytes, budget, &err))
        fail_msg("checkpoint_store: %s", err.msg);
}

/* Turn 1 in its own engine; its checkpoint stored in the database. */
static void first_turn(const char *model, const char *db, const char *doc,
                       int64_t *conv, struct outcome *o)
{
    struct store *s = open_ok(db);
    *conv = new_conversation(s);
    struct engine_thread *e = start_engine(model);
    const char *contents[] = {doc};
    run(e, ENGINE_REQUEST_GENERATE, contents, 1, *conv, NULL, true, o);
    engine_thread_stop(e);
    assert_true(o->len > 0);
    assert_int_equal(o->checkpoint.conversation_id, *conv);
    store_outcome_checkpoint(s, o, 0);
    store_close(s);
}

/* What the second turn answers when nothing is restored. */
static void recomputed_answer(const char *model, const char *const *contents,
                              struct outcome *o)
{
    struct engine_thread *e = start_engine(model);
    run(e, ENGINE_REQUEST_GENERATE, contents, 3, 0, NULL, false, o);
    engine_thread_stop(e);
}

static void fetch_found(const char *db, int64_t conv, const char *fp,
                        struct engine_checkpoint *out)
{
    struct store *s = open_ok(db);   /* a new handle: as a new process */
    struct store_checkpoint ck;
    char note[160];
    struct kk_error err = {{0}};
    assert_int_equal(checkpoint_fetch(s, conv, fp, &ck, note, sizeof note,
                                      &err), 1);
    *out = (struct engine_checkpoint){.conversation_id = conv, .blob = ck.kv,
                                      .bytes = ck.kv_bytes,
                                      .token_ids = ck.token_ids,
                                      .n_tokens = ck.n_tokens};
    store_close(s);
}

/* ---- tests ---- */

static void test_restored_turn_computes_only_new_tokens_and_answers_alike(
    void **state)
{
    struct fixture *fx = *state;
    char *model = golden_path(model_rel);
    if (!model)
        skip();
    char *doc = long_message();
    int64_t conv;
    struct outcome *t1 = calloc(1, sizeof *t1), *t2 = calloc(1, sizeof *t2);
    struct outcome *ref = calloc(1, sizeof *ref);
    struct outcome *same = calloc(1, sizeof *same);
    first_turn(model, fx->db, doc, &conv, t1);
    const char *contents[] = {doc, t1->text, question2};

    /* The uninterrupted run: the same engine goes on to the second turn. */
    struct engine_thread *e = start_engine(model);
    const char *first[] = {doc};
    run(e, ENGINE_REQUEST_GENERATE, first, 1, 0, NULL, false, same);
    assert_string_equal(same->text, t1->text);
    run(e, ENGINE_REQUEST_GENERATE, contents, 3, 0, NULL, false, same);
    engine_thread_stop(e);

    /* A new store handle and a new engine, as after a restart. */
    struct engine_checkpoint ck;
    fetch_found(fx->db, conv, t1->checkpoint.fingerprint, &ck);
    assert_int_equal(ck.n_tokens, t1->checkpoint.n_tokens);
    int common;
    int n = render_count(model, contents, 3, ck.token_ids, ck.n_tokens,
                         &common);
    assert_true(common > 100);   /* the document turn is a shared prefix */
    e = start_engine(model);
    run(e, ENGINE_REQUEST_GENERATE, contents, 3, conv, &ck, true, t2);
    assert_null(ck.blob);   /* taken over by the request */
    engine_thread_stop(e);
    assert_false(t2->refused);
    assert_int_equal(t2->restored, (int)t1->checkpoint.n_tokens);
    /* Only what follows the checkpoint's history was evaluated. */
    assert_int_equal(t2->stats.n_prompt, n - common);
    assert_true(t2->stats.n_prompt < n / 4);
    assert_true(t2->len > 0);
    assert_string_equal(t2->text, same->text);
    recomputed_answer(model, contents, ref);
    assert_int_equal(ref->stats.n_prompt, n);
    assert_string_equal(t2->text, ref->text);

    engine_checkpoint_free(&t1->checkpoint);
    engine_checkpoint_free(&t2->checkpoint);
    free(t1);
    free(t2);
    free(ref);
    free(same);
    free(doc);
    free(model);
}

static void test_checkpoint_of_other_model_files_is_refused_and_recomputed(
    void **state)
{
    struct fixture *fx = *state;
    char *model = golden_path(model_rel), *other = golden_path(other_rel);
    if (!model || !other)
        skip();
    char *doc = long_message();
    struct outcome *t1 = calloc(1, sizeof *t1), *t2 = calloc(1, sizeof *t2);
    struct outcome *ref = calloc(1, sizeof *ref);
    int64_t conv;
    /* Turn 1 answered (and checkpointed) by other model files. */
    first_turn(other, fx->db, doc, &conv, t1);
    struct outcome *llama_t1 = calloc(1, sizeof *llama_t1);
    struct engine_thread *e = start_engine(model);
    const char *first[] = {doc};
    run(e, ENGINE_REQUEST_GENERATE, first, 1, 0, NULL, false, llama_t1);
    engine_thread_stop(e);
    const char *contents[] = {doc, llama_t1->text, question2};

    /* The store tells the controller there is only another model's. */
    struct store *s = open_ok(fx->db);
    struct store_checkpoint sc;
    char note[160];
    struct kk_error err = {{0}};
    struct kk_model *m = NULL;
    assert_int_equal(kk_model_open(model, &m, &err), 0);
    assert_int_equal(checkpoint_fetch(s, conv, kk_model_fingerprint(m), &sc,
                                      note, sizeof note, &err), 0);
    assert_non_null(strstr(note, "other model files"));
    assert_non_null(strstr(note, "recomputing"));
    kk_model_close(m);
    store_close(s);

    /* Handed to the engine anyway, it is refused with a note. */
    struct engine_checkpoint ck;
    fetch_found(fx->db, conv, t1->checkpoint.fingerprint, &ck);
    e = start_engine(model);
    run(e, ENGINE_REQUEST_GENERATE, contents, 3, conv, &ck, true, t2);
    engine_thread_stop(e);
    assert_true(t2->refused);
    assert_non_null(strstr(t2->note, "other model"));
    assert_non_null(strstr(t2->note, "recomputing"));
    recomputed_answer(model, contents, ref);
    assert_int_equal(t2->stats.n_prompt, ref->stats.n_prompt);
    assert_string_equal(t2->text, ref->text);

    engine_checkpoint_free(&t1->checkpoint);
    engine_checkpoint_free(&t2->checkpoint);
    free(t1);
    free(t2);
    free(ref);
    free(llama_t1);
    free(doc);
    free(model);
    free(other);
}

static void test_damaged_checkpoints_are_refused_and_recomputed(void **state)
{
    struct fixture *fx = *state;
    char *model = golden_path(model_rel);
    if (!model)
        skip();
    char *doc = long_message();
    struct outcome *t1 = calloc(1, sizeof *t1), *t2 = calloc(1, sizeof *t2);
    struct outcome *ref = calloc(1, sizeof *ref);
    int64_t conv;
    first_turn(model, fx->db, doc, &conv, t1);
    const char *contents[] = {doc, t1->text, question2};
    const char *fp = t1->checkpoint.fingerprint;

    /* Damaged in the database: the store's checksum catches it. */
    raw_exec(fx->db, "UPDATE checkpoints SET kv_blob = CAST("
                     "substr(kv_blob, 1, 100) || CASE WHEN "
                     "substr(kv_blob, 101, 1) = x'00' THEN x'01' ELSE x'00' "
                     "END || substr(kv_blob, 102) AS BLOB)");
    assert_int_equal(raw_int(fx->db, "SELECT bytes - length(token_ids) - "
                                     "length(kv_blob) FROM checkpoints"), 0);
    struct store *s = open_ok(fx->db);
    struct store_checkpoint sc;
    char note[160];
    struct kk_error err = {{0}};
    assert_int_equal(checkpoint_fetch(s, conv, fp, &sc, note, sizeof note,
                                      &err), 0);
    assert_non_null(strstr(note, "damaged"));

    /* Damaged before it was stored (the checksum matches): the engine's
     * own check refuses it. */
    struct engine_checkpoint *c = &t1->checkpoint;
    ((unsigned char *)c->blob)[c->bytes / 2] ^= 0x40;
    store_outcome_checkpoint(s, t1, 0);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM checkpoints"), 1);
    store_close(s);
    struct engine_checkpoint ck;
    fetch_found(fx->db, conv, fp, &ck);
    struct engine_thread *e = start_engine(model);
    run(e, ENGINE_REQUEST_GENERATE, contents, 3, conv, &ck, true, t2);
    engine_thread_stop(e);
    assert_true(t2->refused);
    assert_non_null(strstr(t2->note, "damaged"));
    recomputed_answer(model, contents, ref);
    assert_int_equal(t2->stats.n_prompt, ref->stats.n_prompt);
    assert_string_equal(t2->text, ref->text);
    /* The recomputed turn left a good checkpoint behind. */
    assert_true(t2->has_checkpoint);

    engine_checkpoint_free(&t1->checkpoint);
    engine_checkpoint_free(&t2->checkpoint);
    free(t1);
    free(t2);
    free(ref);
    free(doc);
    free(model);
}

static void test_store_keeps_newest_checkpoint_per_conversation_within_budget(
    void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t a = new_conversation(s), b = new_conversation(s);
    int32_t ids[4] = {1, 2, 3, 4};
    char kv[1000];
    memset(kv, 7, sizeof kv);
    struct kk_error err = {{0}};
    /* Each checkpoint is 16 + 1000 bytes. */
    assert_int_equal(checkpoint_store(s, a, "fp", ids, 4, kv, 1000, 4096,
                                      &err), 0);
    assert_int_equal(checkpoint_store(s, a, "fp", ids, 4, kv, 1000, 4096,
                                      &err), 0);
    assert_int_equal(checkpoint_store(s, a, "fp-other", ids, 4, kv, 1000,
                                      4096, &err), 0);
    /* Superseded: one per (conversation, model files). */
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM checkpoints WHERE "
                                     "conversation_id = 1 AND "
                                     "model_fingerprint = 'fp'"), 1);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM checkpoints"), 2);
    /* A budget of two: b's newest checkpoint pushes out the least
     * recently used one (a's "fp"). */
    assert_int_equal(checkpoint_store(s, b, "fp", ids, 4, kv, 1000, 2100,
                                      &err), 0);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM checkpoints"), 2);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM checkpoints WHERE "
                                     "conversation_id = 1 AND "
                                     "model_fingerprint = 'fp'"), 0);
    store_close(s);
}

/* ---- kakeya ask, through the binary ---- */


static void test_ask_stores_a_turn_and_resumes_from_its_checkpoint(
    void **state)
{
    struct fixture *fx = *state;
    char *model = golden_path(model_rel);
    if (!model)
        skip();
    const char *bin = getenv("KK_BIN") ? getenv("KK_BIN") : "build/kakeya";
    if (access(bin, X_OK)) {
        fprintf(stderr, "SKIP test_ask: %s is not built\n", bin);
        free(model);
        skip();
    }
    char path[700];
    snprintf(path, sizeof path, "%s/doc.txt", fx->dir);
    char *doc = long_message();
    write_file(path, doc, strlen(doc));
    assert_int_equal(testutil_sh("'%s' ask --model '%s' --db '%s' -t 1 -n 8 "
                        "'What is this about?' < '%s' > '%s/out1' "
                        "2> '%s/err1'", bin, model, fx->db, path, fx->dir,
                        fx->dir), 0);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM documents WHERE "
                                     "source_path = 'stdin'"), 1);
    char *content = raw_text(fx->db, "SELECT content FROM documents");
    assert_string_equal(content, doc);
    free(content);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM messages"), 3);
    char *q = raw_text(fx->db, "SELECT content FROM messages WHERE id = 2");
    assert_string_equal(q, "What is this about?");
    free(q);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM messages WHERE "
                                     "role = 'assistant' AND is_partial = 0 "
                                     "AND stats_json IS NOT NULL"), 1);
    /* stdout is the stored answer (and a final newline). */
    char *answer = raw_text(fx->db, "SELECT content FROM messages WHERE "
                                    "role = 'assistant'");
    snprintf(path, sizeof path, "%s/out1", fx->dir);
    size_t len;
    char *out = testutil_read_file(path, &len);
    assert_true(strlen(answer) > 0 && len == strlen(answer) + 1);
    assert_memory_equal(out, answer, strlen(answer));
    free(out);
    free(answer);
    snprintf(path, sizeof path, "%s/err1", fx->dir);
    char *err = testutil_read_file(path, &len);
    assert_non_null(strstr(err, "conversation 1\n"));
    free(err);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM checkpoints"), 1);

    /* Continuing: the document is not recomputed. */
    assert_int_equal(testutil_sh("'%s' ask -c 1 --model '%s' --db '%s' -t 1 -n 8 "
                        "'And then?' < /dev/null > /dev/null 2> '%s/err2'",
                        bin, model, fx->db, fx->dir), 0);
    snprintf(path, sizeof path, "%s/err2", fx->dir);
    err = testutil_read_file(path, &len);
    assert_non_null(strstr(err, "restored from saved context"));
    assert_non_null(strstr(err, "conversation 1\n"));
    free(err);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM messages"), 5);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM documents"), 1);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM checkpoints"), 1);
    /* A conversation that does not exist is an error, stored nowhere. */
    assert_int_not_equal(testutil_sh("'%s' ask -c 99 --model '%s' --db '%s' -t 1 "
                            "'x' < /dev/null > /dev/null 2>&1", bin, model,
                            fx->db), 0);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM messages"), 5);
    free(doc);
    free(model);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        FIXTURE_TEST(
            test_restored_turn_computes_only_new_tokens_and_answers_alike),
        FIXTURE_TEST(
            test_checkpoint_of_other_model_files_is_refused_and_recomputed),
        FIXTURE_TEST(test_damaged_checkpoints_are_refused_and_recomputed),
        FIXTURE_TEST(
            test_store_keeps_newest_checkpoint_per_conversation_within_budget),
        FIXTURE_TEST(test_ask_stores_a_turn_and_resumes_from_its_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
