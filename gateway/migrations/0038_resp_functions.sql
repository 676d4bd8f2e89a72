-- Layout v35: the RESP family functions (functions/resp_*.sql) answer error codes in `err`
-- (`wrongtype`, `no_such_key`, ...) instead of Redis's texts, which the gateway now holds alone
-- (store/types.rs `SQL_ERRORS`). Gateways of an older layout would show a code as the error
-- text: upgrade the fleet together, as with any layout change.

-- Redis Functions (FUNCTION LOAD, FCALL): the libraries of the whole fleet, for every RESP
-- database, as Redis keeps one set per server. `functions`, `flags` (space-separated, one entry
-- a function) and `descriptions` are what the library registered when it was loaded, in order.
CREATE TABLE pgvs3.resp_function_libraries (
    name         text PRIMARY KEY,
    code         text NOT NULL,
    functions    text[] NOT NULL,
    flags        text[] NOT NULL,
    descriptions text[] NOT NULL,
    loaded_at    timestamptz NOT NULL DEFAULT now()
);
