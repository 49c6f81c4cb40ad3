-- schema.sql — kakeya's conversation store, schema version 2.
--
-- Applied as a whole to a new database; the binary embeds it as
-- app/store_schema.c (tests/test_store.c checks the two are equal).
-- Databases of an older version are brought here by the migrations in
-- app/store_migrate.c. Times are unix milliseconds.

CREATE TABLE conversations (
    id            INTEGER PRIMARY KEY,
    title         TEXT NOT NULL DEFAULT '',
    system_prompt TEXT NOT NULL DEFAULT '',
    target_model  TEXT NOT NULL DEFAULT '',
    draft_model   TEXT NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);

CREATE TABLE messages (
    id              INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL
                    REFERENCES conversations(id) ON DELETE CASCADE,
    role            TEXT NOT NULL
                    CHECK (role IN ('system', 'user', 'assistant')),
    content         TEXT NOT NULL,
    n_tokens        INTEGER NOT NULL DEFAULT 0,
    is_partial      INTEGER NOT NULL DEFAULT 0 CHECK (is_partial IN (0, 1)),
    created_at      INTEGER NOT NULL,
    stats_json      TEXT
);
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);

-- Full-text index over messages.content, kept in sync by the triggers.
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, content='messages', content_rowid='id'
);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content)
        VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content)
        VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;

-- Documents loaded into a conversation; content_hash is
-- "fnv1a64:" followed by 16 hex digits.
CREATE TABLE documents (
    id              INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL
                    REFERENCES conversations(id) ON DELETE CASCADE,
    content         TEXT NOT NULL,
    content_hash    TEXT NOT NULL,
    source_path     TEXT NOT NULL DEFAULT '',
    n_tokens        INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL
);
CREATE INDEX documents_by_conversation ON documents(conversation_id, id);

-- Restored-context checkpoints: the engine's KV state after token_ids
-- (int32 little-endian) for the model files named by model_fingerprint.
-- checksum is FNV-1a 64 over token_ids then kv_blob (as a signed integer);
-- bytes = length(token_ids) + length(kv_blob), what the budget counts.
CREATE TABLE checkpoints (
    id                INTEGER PRIMARY KEY,
    conversation_id   INTEGER NOT NULL
                      REFERENCES conversations(id) ON DELETE CASCADE,
    model_fingerprint TEXT NOT NULL,
    token_ids         BLOB NOT NULL,
    n_tokens          INTEGER NOT NULL,
    kv_blob           BLOB NOT NULL,
    bytes             INTEGER NOT NULL,
    checksum          INTEGER NOT NULL,
    created_at        INTEGER NOT NULL,
    last_used_at      INTEGER NOT NULL
);
CREATE INDEX checkpoints_by_conversation
    ON checkpoints(conversation_id, model_fingerprint, created_at);
CREATE INDEX checkpoints_by_use ON checkpoints(last_used_at);
