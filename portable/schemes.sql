-- pg_webhook_inbox, portable edition: the signature schemes (the compiled
-- edition's src/schemes/ and src/verify.rs), in PL/pgSQL on pgcrypto.
--
-- The catalog is sql/schemes.catalog, the file the compiled edition
-- embeds (src/schemes/catalog.rs): portable/build writes its entries into
-- webhook._catalog() below, and the differential tests compare
-- webhook_schemes() of both editions. Every
-- scheme is verified here as there, answering the same reasons: the HMACs
-- with pgcrypto, the schemes that sign with a private key (Discord's
-- Ed25519, SendGrid's ECDSA, PayPal's RSA, Standard Webhooks' v1a) with
-- public_keys.sql.
--
-- The functions of the schemes read no table, and anyone may call those
-- the compiled edition lets anyone call; here they are SECURITY DEFINER
-- all the same, because they call the internal functions below, which
-- nobody but the extension's owner may.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- The catalog (sql/schemes.catalog): webhook_schemes()'s columns, then
-- how the scheme is made (`make`: its own name, for a kind of its own,
-- paypal or the generic hmac; else the scheme string it is verified as)
-- and what its bodies are.
CREATE FUNCTION webhook._catalog()
RETURNS TABLE (scheme text, aliases text[], event_id_from text, event_type_from text,
               tolerance integer, signs text, entity_key_from text, order_from text,
               body_covered text, headers_covered text[], make text, body text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT * FROM (VALUES
    -- sql/schemes.catalog, written here by portable/build
    ) AS catalog (scheme, aliases, event_id_from, event_type_from, tolerance, signs,
                  entity_key_from, order_from, body_covered, headers_covered, make, body);
END;

-- Whether every alternative of a registry source is covered by a
-- signature that covers the body as `body_covered` says and the headers
-- `headers` (lower case).
CREATE FUNCTION webhook._covers(body_covered text, headers text[], source text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE WHEN source IS NOT NULL THEN coalesce(bool_and(CASE
               WHEN alternative LIKE 'body:%' THEN body_covered = 'digest'
               WHEN alternative LIKE 'header:%' THEN
                   lower(substr(alternative, 8)) = ANY (headers)
               ELSE false
           END), true) END
      FROM unnest(string_to_array(source, '|')) AS alternative;
END;

-- A scheme string whose options are wrong: 42601, naming the argument,
-- the scheme as given and what is wrong with it.
CREATE FUNCTION webhook._bad_scheme(fn text, arg text, given text, detail text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM webhook._raise('42601', format('%s: argument "%s": invalid scheme "%s"', fn, arg, given), detail,
        'Options are for the generic hmac;header=<name>[;algorithm=sha256|sha1|sha512][;encoding=hex|base64][;prefix=<text>] and for paypal;webhook_id=<id>; other schemes take none.');
END
$$;

-- A scheme as webhook_receive and webhook_verify use it: its catalog
-- name, what it is verified as (`kind`), and the generic HMAC's options.
CREATE TYPE webhook._scheme AS (
    name        text,    -- its catalog name
    kind        text,    -- the make it is verified with
    header      text,    -- hmac: the signature's header
    algorithm   text,    -- hmac: sha256, sha1 or sha512
    base64      boolean, -- hmac: base64, not hex
    prefix      text,    -- hmac: before the signature
    tolerance   integer, -- the catalog's window, seconds; NULL: none signed
    body_covered text,
    headers_covered text[],
    body        text,
    webhook_id  text     -- paypal: the webhook's id, which it signs
);

-- "stripe, github, standard (aliases svix, clerk, …), …" for messages.
CREATE FUNCTION webhook._known_schemes() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT string_agg(CASE
               WHEN c.scheme = 'hmac' THEN 'hmac;header=<name>[;algorithm=…][;encoding=…][;prefix=…]'
               WHEN c.scheme = 'token' THEN 'token;header=<name>'
               WHEN cardinality(c.aliases) = 0 THEN c.scheme
               ELSE c.scheme || ' (aliases ' || array_to_string(c.aliases, ', ') || ')'
           END, ', ' ORDER BY c.ord)
      FROM webhook._catalog() WITH ORDINALITY AS c(scheme, aliases, event_id_from, event_type_from,
           tolerance, signs, entity_key_from, order_from, body_covered, headers_covered, make, body, ord);
END;

-- Parse a scheme name (or alias, any case; the generic hmac;… with its
-- options; paypal;webhook_id=…) as the compiled edition does, with its
-- errors: 42704 for a scheme nobody knows, 42601 for bad options.
CREATE FUNCTION webhook._parse_scheme(fn text, arg text, given text) RETURNS webhook._scheme
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    trimmed text := btrim(given);
    base    text := btrim(split_part(btrim(given), ';', 1));
    entry   record;
    result  webhook._scheme;
    option  text;
    key     text;
    value   text;
BEGIN
    SELECT c.* INTO entry FROM webhook._catalog() c
     WHERE lower(c.scheme) = lower(base) OR lower(base) = ANY (c.aliases)
     LIMIT 1;
    IF NOT FOUND THEN
        PERFORM webhook._raise('42704',
            format('%s: argument "%s": unknown signature scheme "%s"; known: %s', fn, arg, given,
                   webhook._known_schemes()));
    END IF;
    IF strpos(given, ';') > 0 AND entry.make NOT IN ('paypal', 'hmac', 'token') THEN
        PERFORM webhook._bad_scheme(fn, arg, given, format('Scheme "%s" takes no options.', entry.scheme));
    END IF;
    IF entry.make LIKE 'hmac;%' OR entry.make LIKE 'token;%'
       OR entry.make = 'standard' AND entry.scheme <> 'standard' THEN
        -- A provider verified exactly as another scheme, under its own name.
        result := webhook._parse_scheme(fn, arg, entry.make);
    ELSE
        result := ROW(entry.scheme, entry.make, NULL, 'sha256', false, '', NULL, NULL, NULL, NULL, NULL);
    END IF;
    result.name := entry.scheme;
    result.tolerance := entry.tolerance;
    result.body_covered := entry.body_covered;
    result.headers_covered := entry.headers_covered;
    result.body := entry.body;
    IF entry.make = 'paypal' THEN
        FOREACH option IN ARRAY (string_to_array(trimmed, ';'))[2:] LOOP
            IF strpos(option, '=') > 0 AND lower(btrim(split_part(option, '=', 1))) = 'webhook_id' THEN
                value := btrim(substr(option, strpos(option, '=') + 1));
                IF value = '' OR strpos(value, '|') > 0 THEN
                    PERFORM webhook._bad_scheme(fn, arg, given, format('webhook_id "%s" is not a PayPal webhook id', value));
                END IF;
                result.webhook_id := value;
            ELSE
                PERFORM webhook._bad_scheme(fn, arg, given, format('unknown option "%s"', option));
            END IF;
        END LOOP;
        IF result.webhook_id IS NULL THEN
            PERFORM webhook._bad_scheme(fn, arg, given, 'PayPal signs with the webhook''s id: write the scheme as paypal;webhook_id=<id>');
        END IF;
    ELSIF entry.make IN ('hmac', 'token') AND result.header IS NULL THEN
        -- One grammar for both; a shared token takes the header alone.
        FOREACH option IN ARRAY (string_to_array(trimmed, ';'))[2:] LOOP
            IF strpos(option, '=') = 0 THEN
                PERFORM webhook._bad_scheme(fn, arg, given, format('option "%s" is not key=value', option));
            END IF;
            key := lower(btrim(split_part(option, '=', 1)));
            value := substr(option, strpos(option, '=') + 1);
            IF key = 'header' AND btrim(value) <> '' THEN
                result.header := btrim(value);
            ELSIF entry.make = 'token' THEN
                PERFORM webhook._bad_scheme(fn, arg, given, format('unknown option "%s"', key));
            ELSIF key = 'algorithm' THEN
                IF webhook._algorithm(btrim(value)) IS NULL THEN
                    PERFORM webhook._bad_scheme(fn, arg, given, format('unknown algorithm "%s"', value));
                END IF;
                result.algorithm := webhook._algorithm(btrim(value));
            ELSIF key = 'encoding' THEN
                IF lower(btrim(value)) NOT IN ('hex', 'base64') THEN
                    PERFORM webhook._bad_scheme(fn, arg, given, format('unknown encoding "%s"', lower(btrim(value))));
                END IF;
                result.base64 := lower(btrim(value)) = 'base64';
            ELSIF key = 'prefix' THEN
                result.prefix := value;
            ELSE
                PERFORM webhook._bad_scheme(fn, arg, given, format('unknown option "%s"', key));
            END IF;
        END LOOP;
        IF result.header IS NULL THEN
            PERFORM webhook._bad_scheme(fn, arg, given, 'the header option is required');
        END IF;
    END IF;
    RETURN result;
END
$$;

-- How a registered secret becomes an HMAC key under a scheme; NULL when
-- it cannot be one. Standard Webhooks' keys are whsec_ and base64 (with
-- v1, in front as Supabase's dashboard shows them); every other scheme's
-- secret is used as the bytes of the string.
CREATE FUNCTION webhook._hmac_key(s webhook._scheme, secret text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        -- Polar's is its secret's own bytes; Adyen's the hex the Customer
        -- Area shows (src/schemes/mod.rs, Scheme::key).
        WHEN (s).name = 'polar' THEN convert_to(secret, 'UTF8')
        WHEN (s).kind = 'adyen' THEN CASE WHEN secret ~ '^([0-9a-fA-F]{2})+$' THEN decode(secret, 'hex') END
        WHEN (s).kind <> 'standard' THEN convert_to(secret, 'UTF8')
        WHEN secret LIKE 'whsec\_%' THEN nullif(webhook._base64_any(substr(secret, 7)), '\x'::bytea)
        WHEN secret LIKE 'v1,whsec\_%' THEN nullif(webhook._base64_any(substr(secret, 10)), '\x'::bytea)
    END;
END;

-- A registered secret as a scheme reads it (src/schemes/keys.rs,
-- Registered): an HMAC key, or a provider's public key, checked once
-- read: an Ed25519 point (its encoding, as verify_strict hashes it, and
-- the point {x, y}), a P-256 point {x, y}, or an RSA key {n, e} with the
-- certificate's name (the URL PayPal names it by). NULL when the secret
-- is no key of the scheme. A registered public key is read once, when it
-- is registered (webhook._public_keys, registry.sql).
CREATE TYPE webhook._key AS (
    kind   text,       -- hmac, ed25519, p256 or rsa
    bytes  bytea,      -- hmac: the key; ed25519: the point's encoding
    nums   numeric[],  -- ed25519, p256: {x, y}; rsa: {n, e, n's length in bytes}
    name   text        -- rsa: the certificate's URL
);

CREATE FUNCTION webhook._scheme_key(s webhook._scheme, secret text) RETURNS webhook._key
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    k     webhook._key;
    raw   bytea;
    point numeric[];
    start integer;
    name  text;
BEGIN
    CASE s.kind
    WHEN 'standard' THEN
        IF secret LIKE 'whpk\_%' AND s.name <> 'polar' THEN
            raw := webhook._base64_any(substr(secret, 6));
            point := CASE WHEN octet_length(raw) = 32 THEN webhook._ed25519_point(raw) END;
            IF point IS NOT NULL THEN
                k := ROW('ed25519', raw, point, NULL);
            END IF;
        ELSE
            raw := webhook._hmac_key(s, secret);
            IF raw IS NOT NULL THEN
                k := ROW('hmac', raw, NULL, NULL);
            END IF;
        END IF;
    WHEN 'discord', 'telnyx' THEN
        raw := CASE s.kind WHEN 'discord' THEN webhook._hex(btrim(secret, E' \t\n\r\f\u000b'), 32)
                           ELSE webhook._base64(btrim(secret, E' \t\n\r\f\u000b'), 32) END;
        point := webhook._ed25519_point(raw);
        IF point IS NOT NULL THEN
            k := ROW('ed25519', raw, point, NULL);
        END IF;
    WHEN 'sendgrid' THEN
        k := ROW('p256', NULL, webhook._p256_key(webhook._pem_or_base64(secret, 'PUBLIC KEY')), NULL);
        IF k.nums IS NULL THEN
            k := NULL;
        END IF;
    WHEN 'adyen' THEN
        raw := webhook._hmac_key(s, secret);
        IF raw IS NOT NULL THEN
            k := ROW('hmac', raw, NULL, NULL);
        END IF;
    WHEN 'paypal', 'aws_sns' THEN
        -- The certificate's URL on the first line, then its PEM.
        start := strpos(secret, '-----BEGIN');
        name := CASE WHEN start > 0 THEN btrim(left(secret, start - 1), E' \t\n\r\f\u000b') END;
        IF name <> '' THEN
            k := ROW('rsa', NULL,
                     webhook._rsa_certificate_key(webhook._pem_or_base64(substr(secret, start), 'CERTIFICATE')),
                     name);
            IF k.nums IS NULL THEN
                k := NULL;
            END IF;
        END IF;
    ELSE
        k := ROW('hmac', webhook._hmac_key(s, secret), NULL, NULL);
    END CASE;
    RETURN k;
END
$$;

-- Whether a key verifies a candidate signature of the signed bytes. The
-- public-key candidates are marked by their first byte (1 Ed25519, 2 a DER
-- ECDSA signature, 3 RSA), which an HMAC's is not read by.
CREATE FUNCTION webhook._key_verifies(k webhook._key, candidates bytea[], signed bytea, algorithm text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    candidate bytea;
    mac bytea;
BEGIN
    IF k.kind = 'hmac' THEN
        -- One MAC of the signed bytes, compared with each candidate.
        mac := webhook._hmac(signed, k.bytes, algorithm);
        RETURN EXISTS (SELECT FROM unnest(candidates) c WHERE webhook._same_mac(c, mac));
    END IF;
    FOREACH candidate IN ARRAY candidates LOOP
        IF k.kind = 'ed25519' AND octet_length(candidate) = 65 AND get_byte(candidate, 0) = 1 THEN
            IF webhook._ed25519_verify(k.bytes, substr(candidate, 2), signed, k.nums) THEN
                RETURN true;
            END IF;
        ELSIF k.kind = 'p256' AND get_byte(candidate, 0) = 2 THEN
            IF webhook._p256_verify(k.nums, substr(candidate, 2), signed) THEN
                RETURN true;
            END IF;
        ELSIF k.kind = 'rsa' AND get_byte(candidate, 0) = 3 THEN
            IF webhook._rsa_verify(k.nums, substr(candidate, 2), signed) THEN
                RETURN true;
            END IF;
        END IF;
    END LOOP;
    RETURN false;
END
$$;

-- CRC32's table (IEEE, the reflected polynomial 0xEDB88320), one entry a
-- byte. IMMUTABLE and without arguments, so that the planner computes it
-- once, when _crc32's use of it is planned (once a session), not at each
-- delivery.
CREATE FUNCTION webhook._crc32_table() RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    t bigint[] := '{}';
    c bigint;
BEGIN
    FOR n IN 0 .. 255 LOOP
        c := n;
        FOR k IN 1 .. 8 LOOP
            c := CASE WHEN c & 1 = 1 THEN 3988292384 # (c >> 1) ELSE c >> 1 END;
        END LOOP;
        t := t || c;
    END LOOP;
    RETURN t;
END
$$;

-- CRC32 (IEEE) of the body, as PayPal signs it; linear in its length.
CREATE FUNCTION webhook._crc32(body bytea) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    t CONSTANT bigint[] := webhook._crc32_table();
    c bigint := 4294967295;
BEGIN
    FOR i IN 0 .. octet_length(body) - 1 LOOP
        c := t[((c # get_byte(body, i)) & 255) + 1] # (c >> 8);
    END LOOP;
    RETURN c # 4294967295;
END
$$;

-- Headers as a handler passes them, read as the compiled edition reads
-- them (src/schemes/headers.rs): names in ASCII lower case; a value that
-- is not a string, longer than 8 kB, or given twice under names that
-- differ only in case is JSON null (present, unusable); the others
-- trimmed. NULL: not an object, or more than 1000 names.
CREATE FUNCTION webhook._headers(headers jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE WHEN jsonb_typeof(headers) = 'object' THEN (
        SELECT CASE WHEN count(*) <= 1000 THEN
                   coalesce(jsonb_object_agg(x.name, CASE
                       WHEN x.n = 1 AND jsonb_typeof(x.value) = 'string'
                            AND octet_length(x.value #>> '{}') <= 8192
                           THEN to_jsonb(btrim(x.value #>> '{}', E' \t\n\r\f\u000b'))
                       ELSE 'null'::jsonb
                   END), '{}')
               END
          FROM (SELECT translate(key, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') AS name,
                       value, count(*) OVER (PARTITION BY translate(key, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ',
                                                                        'abcdefghijklmnopqrstuvwxyz')) AS n
                  FROM jsonb_each(headers)) x)
    END;
END;

-- What a scheme reads off a request (src/schemes/mod.rs, Signed): the
-- signatures to try, the bytes signed around the body, the signing time;
-- or why it cannot be read.
CREATE TYPE webhook._signed AS (
    reason      text,     -- NULL: read; else missing_header, malformed_header, missing_url, bad_signature
    algorithm   text,     -- of the HMACs
    candidates  bytea[],
    prefixes    bytea[],  -- alternatives, tried in order
    body_signed boolean,  -- false: the body is covered inside the prefix
    suffix      bytea,
    signed_at   bigint,   -- Unix seconds
    covered     text[],   -- headers this delivery's signature covers
    key_name    text      -- the key the request says signed it (PayPal's certificate URL)
);

-- A Unix timestamp in whole seconds; NULL for anything else.
CREATE FUNCTION webhook._unix_seconds(text text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN text ~ '^[0-9]{1,12}$' THEN text::bigint END;

-- An RFC 3339 timestamp as Unix seconds (src/timestamps.rs); NULL for
-- anything else.
CREATE FUNCTION webhook._rfc3339(text text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    m text[] := regexp_match(text,
        '^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?([Zz]|([+-])([0-9]{2}):([0-9]{2}))$');
    year integer; month integer; day integer; seconds bigint; offset_s integer := 0;
BEGIN
    IF m IS NULL THEN
        RETURN NULL;
    END IF;
    year := m[1]::integer; month := m[2]::integer; day := m[3]::integer;
    IF month NOT BETWEEN 1 AND 12 OR day < 1
       OR day > extract(day FROM (make_date(greatest(year, 1), month, 1) + interval '1 month - 1 day'))
       OR m[4]::integer > 23 OR m[5]::integer > 59 OR m[6]::integer > 60 THEN
        RETURN NULL;
    END IF;
    IF m[9] IS NOT NULL THEN
        IF m[10]::integer > 23 OR m[11]::integer > 59 THEN
            RETURN NULL;
        END IF;
        offset_s := (m[10]::integer * 3600 + m[11]::integer * 60) * CASE m[9] WHEN '-' THEN -1 ELSE 1 END;
    END IF;
    seconds := (make_date(greatest(year, 1), month, day) - date '1970-01-01')::bigint * 86400
               + m[4]::integer * 3600 + m[5]::integer * 60 + m[6]::integer - offset_s;
    RETURN seconds;
END
$$;

-- The t=…,v1=… family (Stripe with ',', Paddle with ';', Calendly).
CREATE FUNCTION webhook._timestamp_and_signatures(header text, separator text, ts_key text, sig_key text)
RETURNS webhook._signed
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    item       text;
    ts         bigint;
    candidates bytea[] := '{}';
    k          text;
    v          text;
    result     webhook._signed;
BEGIN
    -- Items untrimmed, a second timestamp malformed: src/schemes/mod.rs.
    FOREACH item IN ARRAY string_to_array(header, separator) LOOP
        CONTINUE WHEN strpos(item, '=') = 0;
        k := split_part(item, '=', 1);
        v := substr(item, strpos(item, '=') + 1);
        IF k = ts_key THEN
            IF ts IS NOT NULL THEN
                result.reason := 'malformed_header';
                RETURN result;
            END IF;
            ts := webhook._unix_seconds(v);
            IF ts IS NULL THEN
                result.reason := 'malformed_header';
                RETURN result;
            END IF;
        ELSIF k = sig_key AND webhook._signature_hex(v, 32) IS NOT NULL THEN
            candidates := candidates || webhook._signature_hex(v, 32);
        END IF;
    END LOOP;
    IF ts IS NULL OR cardinality(candidates) = 0 THEN
        result.reason := 'malformed_header';
        RETURN result;
    END IF;
    RETURN ROW(NULL, 'sha256', candidates, NULL, true, '\x', ts, '{}', NULL)::webhook._signed;
END
$$;

-- Every routine here that decodes, splits or escapes a request runs in
-- time linear in its input: a forged request is read before its
-- signature is checked, so a quadratic loop (a text or bytea grown one
-- piece at a time, each append a copy) would let an unauthenticated
-- sender spend seconds of a connection per megabyte. They split once
-- (string_to_array) and join once (string_agg) instead.

-- HubSpot's URL: the escapes it decodes before signing.
CREATE FUNCTION webhook._hubspot_uri(url text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT coalesce(string_agg(CASE WHEN p.n = 1 THEN p.piece
                                    WHEN e.plain IS NOT NULL THEN e.plain || substr(p.piece, 3)
                                    ELSE '%' || p.piece
                               END, '' ORDER BY p.n), '')
      FROM unnest(string_to_array(url, '%')) WITH ORDINALITY AS p(piece, n)
           LEFT JOIN (VALUES ('3A', ':'), ('2F', '/'), ('3F', '?'), ('40', '@'), ('21', '!'), ('24', '$'),
                             ('27', ''''), ('28', '('), ('29', ')'), ('2A', '*'), ('2C', ','), ('3B', ';'))
                     AS e(code, plain) ON e.code = upper(left(p.piece, 2));
END;

-- Percent-decoding as browsers and Twilio's libraries do it: '+' is a
-- space, a malformed escape is kept as written. Works on the body's
-- escape() text form, so that bytes outside UTF-8 survive: that form
-- writes every byte but '\', NUL and those above 0x7e as itself, so a
-- '%' in it is the body's, and so are the two characters after it. Split
-- before each escape (a '%' and two hex digits), every piece after the
-- first starts with one.
CREATE FUNCTION webhook._percent_decode(text text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT coalesce(string_agg(CASE WHEN p.n = 1 THEN decode(p.piece, 'escape')
                                    ELSE decode(left(p.piece, 2), 'hex') || decode(substr(p.piece, 3), 'escape')
                               END, '\x'::bytea ORDER BY p.n), '\x'::bytea)
      FROM unnest(regexp_split_to_array(replace(text, '+', ' '), '%(?=[0-9A-Fa-f]{2})')) WITH ORDINALITY AS p(piece, n);
END;

-- The most fields a form body may have under a scheme that reads its
-- fields before checking its signature (Twilio signs them sorted). The
-- providers send a few dozen; a form of more is refused as not theirs
-- (bad_signature) before any field is decoded or sorted. The compiled
-- edition's twin is schemes::MAX_FORM_FIELDS.
CREATE FUNCTION webhook._max_form_fields() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN 1000;

-- A form body's non-empty fields, as written, in order ('&' separates
-- them): the name before the first '=', the value after it ('' without
-- one). In the body's escape() text form, as _percent_decode takes it.
CREATE FUNCTION webhook._form_pairs(body bytea)
RETURNS TABLE (name text, value text, n bigint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT split_part(p.pair, '=', 1),
           CASE WHEN strpos(p.pair, '=') > 0 THEN substr(p.pair, strpos(p.pair, '=') + 1) ELSE '' END,
           p.n
      FROM unnest(string_to_array(encode(body, 'escape'), '&')) WITH ORDINALITY AS p(pair, n)
     WHERE p.pair <> '';
END;

-- A form body's fields, percent-decoded ('+' a space), sorted by name
-- then value, concatenated: what Twilio signs after the URL. NULL for a
-- form of more than _max_form_fields() fields, counted first.
CREATE FUNCTION webhook._twilio_fields(body bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE WHEN (SELECT count(*) FROM webhook._form_pairs(body)) <= webhook._max_form_fields() THEN
               (SELECT coalesce(string_agg(f.name || f.value, '\x'::bytea ORDER BY f.name, f.value), '\x')
                  FROM (SELECT webhook._percent_decode(p.name) AS name, webhook._percent_decode(p.value) AS value
                          FROM webhook._form_pairs(body) p) f)
           END;
END;

-- The URL as given, then with its scheme's default port added or removed
-- (Twilio has signed both forms).
CREATE FUNCTION webhook._url_forms(url text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    port   text;
    scheme text;
    rest   text;
    stop   integer;
    authority text;
    path   text;
    host   text;
    userinfo text;
BEGIN
    IF url LIKE 'https://%' THEN
        port := ':443'; scheme := 'https://';
    ELSIF url LIKE 'http://%' THEN
        port := ':80'; scheme := 'http://';
    ELSE
        RETURN ARRAY[url];
    END IF;
    rest := substr(url, length(scheme) + 1);
    stop := coalesce(nullif(least(nullif(strpos(rest, '/'), 0), nullif(strpos(rest, '?'), 0),
                                  nullif(strpos(rest, '#'), 0)), 0), length(rest) + 1);
    authority := left(rest, stop - 1);
    path := substr(rest, stop);
    host := (string_to_array(authority, '@'))[cardinality(string_to_array(authority, '@'))];
    userinfo := left(authority, length(authority) - length(host));
    IF right(host, length(port)) = port THEN
        RETURN ARRAY[url, scheme || userinfo || left(host, -length(port)) || path];
    ELSIF right(host, 1) <> ']' AND strpos(host, ':') = 0 THEN
        RETURN ARRAY[url, scheme || userinfo || host || port || path];
    END IF;
    RETURN ARRAY[url];
END
$$;

-- Read a request under a scheme: src/schemes/<provider>.rs, each in the
-- order the provider's module reads it, so that a request with two
-- problems is answered the same reason by both editions.
CREATE FUNCTION webhook._read(s webhook._scheme, h jsonb, body bytea, url text)
RETURNS webhook._signed
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    r       webhook._signed;
    sig     text;
    ts      text;
    id      text;
    digest  bytea;
    family  text;
    entry   text;
    method  text;
    known   boolean := false;
    doc     jsonb;
    fields  bytea;
    millis  bigint;
BEGIN
    r.candidates := '{}'; r.body_signed := true; r.suffix := '\x'; r.covered := '{}'; r.algorithm := 'sha256';
    CASE s.kind
    WHEN 'stripe', 'calendly', 'paddle' THEN
        family := CASE s.kind WHEN 'stripe' THEN 'stripe-signature'
                              WHEN 'calendly' THEN 'calendly-webhook-signature'
                              ELSE 'paddle-signature' END;
        IF NOT h ? family THEN r.reason := 'missing_header'; RETURN r; END IF;
        IF h ->> family IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF s.kind = 'paddle' THEN
            r := webhook._timestamp_and_signatures(h ->> family, ';', 'ts', 'h1');
            r.prefixes := ARRAY[convert_to(r.signed_at || ':', 'UTF8')];
        ELSE
            r := webhook._timestamp_and_signatures(h ->> family, ',', 't', 'v1');
            r.prefixes := ARRAY[convert_to(r.signed_at || '.', 'UTF8')];
        END IF;
        RETURN r;
    WHEN 'workos' THEN
        -- Items trimmed of ASCII whitespace, the first t and the first v1;
        -- t in milliseconds, signed as sent (src/schemes/workos.rs).
        IF NOT h ? 'workos-signature' THEN r.reason := 'missing_header'; RETURN r; END IF;
        IF h ->> 'workos-signature' IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        FOREACH entry IN ARRAY string_to_array(h ->> 'workos-signature', ',') LOOP
            entry := btrim(entry, E' \t\n\r\f');
            IF ts IS NULL AND entry LIKE 't=%' THEN
                ts := substr(entry, 3);
            ELSIF sig IS NULL AND entry LIKE 'v1=%' THEN
                sig := substr(entry, 4);
            END IF;
        END LOOP;
        IF ts IS NULL OR ts !~ '^[0-9]{1,15}$' OR webhook._signature_hex(sig, 32) IS NULL THEN
            r.reason := 'malformed_header'; RETURN r;
        END IF;
        r.candidates := ARRAY[webhook._signature_hex(sig, 32)];
        r.signed_at := ts::bigint / 1000;
        r.prefixes := ARRAY[convert_to(ts || '.', 'UTF8')];
        RETURN r;
    WHEN 'token' THEN
        -- The token as the key of an HMAC of a fixed message, which a
        -- registered secret's MAC equals exactly when the token is the
        -- secret (src/schemes/token.rs).
        IF NOT h ? lower(s.header) THEN r.reason := 'missing_header'; RETURN r; END IF;
        sig := h ->> lower(s.header);
        IF sig IS NULL OR sig = '' OR octet_length(sig) > 1024 THEN r.reason := 'malformed_header'; RETURN r; END IF;
        r.prefixes := ARRAY[convert_to(E'pg_webhook_inbox shared token\n', 'UTF8')];
        digest := webhook._hmac(r.prefixes[1], convert_to(sig, 'UTF8'), 'sha256');
        r.body_signed := false;
    WHEN 'zendesk' THEN
        IF NOT h ? 'x-zendesk-webhook-signature' THEN r.reason := 'missing_header'; RETURN r; END IF;
        digest := webhook._base64(h ->> 'x-zendesk-webhook-signature', 32);
        IF digest IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF NOT h ? 'x-zendesk-webhook-signature-timestamp' THEN r.reason := 'missing_header'; RETURN r; END IF;
        ts := h ->> 'x-zendesk-webhook-signature-timestamp';
        r.signed_at := webhook._rfc3339(ts);
        IF r.signed_at IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        r.prefixes := ARRAY[convert_to(ts, 'UTF8')];
        r.covered := ARRAY['x-zendesk-webhook-signature-timestamp'];
    WHEN 'github' THEN
        -- SHA-256 only, as GitHub's own library: the legacy SHA-1 header
        -- is not read (src/schemes/github.rs).
        IF NOT h ? 'x-hub-signature-256' THEN r.reason := 'missing_header'; RETURN r; END IF;
        sig := h ->> 'x-hub-signature-256';
        IF sig IS NULL OR sig NOT LIKE 'sha256=%' THEN r.reason := 'malformed_header'; RETURN r; END IF;
        digest := webhook._signature_hex(substr(sig, 8), 32);
    WHEN 'standard' THEN
        -- Both families only as one (src/schemes/standard.rs).
        IF h ? 'webhook-signature' AND h ? 'svix-signature' THEN
            FOREACH entry IN ARRAY ARRAY['webhook-id', 'svix-id', 'webhook-timestamp', 'svix-timestamp',
                                          'webhook-signature', 'svix-signature'] LOOP
                IF NOT h ? entry THEN r.reason := 'missing_header'; RETURN r; END IF;
                IF h ->> entry IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
                IF entry LIKE 'svix-%' AND h ->> entry <> h ->> ('webhook-' || substr(entry, 6)) THEN
                    r.reason := 'malformed_header'; RETURN r;
                END IF;
            END LOOP;
        END IF;
        family := CASE WHEN h ? 'webhook-signature' OR NOT h ? 'svix-signature' THEN 'webhook-' ELSE 'svix-' END;
        FOREACH entry IN ARRAY ARRAY['signature', 'id', 'timestamp'] LOOP
            IF NOT h ? (family || entry) THEN r.reason := 'missing_header'; RETURN r; END IF;
            IF h ->> (family || entry) IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
            -- The timestamp is parsed before the id's emptiness is judged.
            IF entry = 'timestamp' AND webhook._unix_seconds(h ->> (family || entry)) IS NULL THEN
                r.reason := 'malformed_header'; RETURN r;
            END IF;
        END LOOP;
        id := h ->> (family || 'id');
        IF id = '' THEN r.reason := 'malformed_header'; RETURN r; END IF;
        r.signed_at := webhook._unix_seconds(h ->> (family || 'timestamp'));
        FOREACH entry IN ARRAY regexp_split_to_array(btrim(h ->> (family || 'signature'), E' \t\n\r\f'), E'[ \t\n\r\f]+') LOOP
            IF entry LIKE 'v1,%' THEN
                known := true;
                digest := webhook._base64(substr(entry, 4), 32);
                IF digest IS NOT NULL THEN r.candidates := r.candidates || digest; END IF;
            ELSIF entry LIKE 'v1a,%' THEN
                -- Ed25519: read, so that a header of only v1a signatures
                -- is judged as the compiled edition judges it; no HMAC
                -- key verifies it.
                known := true;
                IF webhook._base64(substr(entry, 5), 64) IS NOT NULL THEN
                    r.candidates := r.candidates || ('\x01'::bytea || webhook._base64(substr(entry, 5), 64));
                END IF;
            END IF;
        END LOOP;
        IF NOT known OR cardinality(r.candidates) = 0 THEN r.reason := 'malformed_header'; RETURN r; END IF;
        r.prefixes := ARRAY[convert_to(id || '.' || r.signed_at || '.', 'UTF8')];
        r.covered := CASE WHEN h ? 'svix-signature' AND family = 'webhook-'
                          THEN ARRAY['webhook-id', 'webhook-timestamp', 'svix-id', 'svix-timestamp']
                          ELSE ARRAY[family || 'id', family || 'timestamp'] END;
        RETURN r;
    WHEN 'shopify' THEN
        -- Webhooks' header, else Events' (the same HMAC, without the X-):
        -- the first of the scheme's signature headers that is present.
        sig := coalesce((SELECT x.name FROM unnest(webhook._signature_headers(s)) WITH ORDINALITY AS x(name, n)
                          WHERE h ? x.name ORDER BY x.n LIMIT 1),
                        'x-shopify-hmac-sha256');
        IF NOT h ? sig THEN r.reason := 'missing_header'; RETURN r; END IF;
        digest := webhook._base64(h ->> sig, 32);
    WHEN 'slack', 'zoom' THEN
        family := CASE s.kind WHEN 'slack' THEN 'x-slack-' ELSE 'x-zm-' END;
        sig := CASE s.kind WHEN 'slack' THEN 'x-slack-signature' ELSE 'x-zm-signature' END;
        IF NOT h ? sig THEN r.reason := 'missing_header'; RETURN r; END IF;
        IF h ->> sig IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF s.kind = 'zoom' AND h ->> sig NOT LIKE 'v0=%' THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF NOT h ? (family || 'request-timestamp') THEN r.reason := 'missing_header'; RETURN r; END IF;
        ts := h ->> (family || 'request-timestamp');
        r.signed_at := webhook._unix_seconds(ts);
        IF r.signed_at IS NULL OR h ->> sig NOT LIKE 'v0=%' THEN r.reason := 'malformed_header'; RETURN r; END IF;
        digest := webhook._signature_hex(substr(h ->> sig, 4), 32);
        r.prefixes := ARRAY[convert_to('v0:' || r.signed_at || ':', 'UTF8')];
        r.covered := ARRAY[family || 'request-timestamp'];
    WHEN 'twitch' THEN
        IF NOT h ? 'twitch-eventsub-message-signature' THEN r.reason := 'missing_header'; RETURN r; END IF;
        sig := h ->> 'twitch-eventsub-message-signature';
        IF sig IS NULL OR sig NOT LIKE 'sha256=%' THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF NOT h ? 'twitch-eventsub-message-id' THEN r.reason := 'missing_header'; RETURN r; END IF;
        id := h ->> 'twitch-eventsub-message-id';
        IF id IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF NOT h ? 'twitch-eventsub-message-timestamp' THEN r.reason := 'missing_header'; RETURN r; END IF;
        ts := h ->> 'twitch-eventsub-message-timestamp';
        r.signed_at := webhook._rfc3339(ts);
        IF ts IS NULL OR r.signed_at IS NULL OR id = '' THEN r.reason := 'malformed_header'; RETURN r; END IF;
        digest := webhook._signature_hex(substr(sig, 8), 32);
        r.prefixes := ARRAY[convert_to(id || ts, 'UTF8')];
        r.covered := ARRAY['twitch-eventsub-message-id', 'twitch-eventsub-message-timestamp'];
    WHEN 'square' THEN
        IF NOT h ? 'x-square-hmacsha256-signature' THEN r.reason := 'missing_header'; RETURN r; END IF;
        digest := webhook._base64(h ->> 'x-square-hmacsha256-signature', 32);
        IF digest IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF url IS NULL THEN r.reason := 'missing_url'; RETURN r; END IF;
        r.prefixes := ARRAY[convert_to(url, 'UTF8')];
    WHEN 'linear' THEN
        IF NOT h ? 'linear-signature' THEN r.reason := 'missing_header'; RETURN r; END IF;
        digest := webhook._signature_hex(h ->> 'linear-signature', 32);
        IF digest IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        doc := webhook._json_or_null(body);
        IF jsonb_typeof(doc -> 'webhookTimestamp') = 'number'
           AND (doc ->> 'webhookTimestamp') ~ '^[0-9]{1,18}$' THEN
            millis := (doc ->> 'webhookTimestamp')::bigint;
        END IF;
        IF millis IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        r.signed_at := millis / 1000;
    WHEN 'hubspot' THEN
        IF NOT h ? 'x-hubspot-signature-v3' THEN r.reason := 'missing_header'; RETURN r; END IF;
        digest := webhook._base64(h ->> 'x-hubspot-signature-v3', 32);
        IF digest IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF NOT h ? 'x-hubspot-request-timestamp' THEN r.reason := 'missing_header'; RETURN r; END IF;
        ts := h ->> 'x-hubspot-request-timestamp';
        IF ts IS NULL OR ts !~ '^[0-9]{1,15}$' THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF url IS NULL THEN r.reason := 'missing_url'; RETURN r; END IF;
        r.signed_at := ts::bigint / 1000;
        r.prefixes := ARRAY[convert_to('POST' || webhook._hubspot_uri(url), 'UTF8')];
        r.suffix := convert_to(ts, 'UTF8');
        r.covered := ARRAY['x-hubspot-request-timestamp'];
    WHEN 'mailgun' THEN
        doc := webhook._json_or_null(body);
        IF doc IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF jsonb_typeof(doc) <> 'object' OR NOT doc ? 'signature' THEN r.reason := 'missing_header'; RETURN r; END IF;
        doc := doc -> 'signature';
        FOREACH entry IN ARRAY ARRAY['timestamp', 'token', 'signature'] LOOP
            IF jsonb_typeof(doc) <> 'object' OR NOT doc ? entry THEN r.reason := 'missing_header'; RETURN r; END IF;
            IF jsonb_typeof(doc -> entry) <> 'string' THEN r.reason := 'malformed_header'; RETURN r; END IF;
            IF entry = 'timestamp' AND webhook._unix_seconds(doc ->> 'timestamp') IS NULL THEN
                r.reason := 'malformed_header'; RETURN r;
            END IF;
            IF entry = 'token' AND (doc ->> 'token' = '' OR octet_length(doc ->> 'token') > 256) THEN
                r.reason := 'malformed_header'; RETURN r;
            END IF;
        END LOOP;
        digest := webhook._signature_hex(doc ->> 'signature', 32);
        IF digest IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        r.signed_at := webhook._unix_seconds(doc ->> 'timestamp');
        r.prefixes := ARRAY[convert_to((doc ->> 'timestamp') || (doc ->> 'token'), 'UTF8')];
        r.body_signed := false;
    WHEN 'twilio' THEN
        IF NOT h ? 'x-twilio-signature' THEN r.reason := 'missing_header'; RETURN r; END IF;
        -- A Webhook Setting's shared key: the first algorithm its settings
        -- header names (src/schemes/twilio.rs); none, the auth token's.
        r.algorithm := 'sha1';
        IF h ? 'x-twilio-webhooks-signature-settings' THEN
            IF h ->> 'x-twilio-webhooks-signature-settings' IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
            SELECT translate(btrim(substr(p.part, strpos(p.part, '=') + 1), E' \t'),  -- ASCII letters only, as Rust's
                             'abcdefghijklmnopqrstuvwxyz', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ') INTO method
              FROM regexp_split_to_table(h ->> 'x-twilio-webhooks-signature-settings', ',') WITH ORDINALITY AS p(part, n)
             WHERE strpos(p.part, '=') > 0
               AND btrim(substr(p.part, 1, strpos(p.part, '=') - 1), E' \t') = 'algorithm'
               AND btrim(substr(p.part, strpos(p.part, '=') + 1), E' \t') <> ''
             ORDER BY p.n LIMIT 1;
            r.algorithm := CASE coalesce(method, 'HMAC_SHA1') WHEN 'HMAC_SHA1' THEN 'sha1' WHEN 'HMAC_SHA256' THEN 'sha256' END;
            IF r.algorithm IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        END IF;
        digest := webhook._base64(h ->> 'x-twilio-signature', CASE r.algorithm WHEN 'sha1' THEN 20 ELSE 32 END);
        IF digest IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF url IS NULL THEN r.reason := 'missing_url'; RETURN r; END IF;
        sig := substring(split_part(url, '#', 1) FROM '[?&]bodySHA256=([^&]*)');
        IF strpos(split_part(url, '#', 1), '?') > 0 AND sig IS NOT NULL THEN
            -- Public data against public data: no secret to time.
            IF lower(sig) <> encode(sha256(body), 'hex') THEN r.reason := 'bad_signature'; RETURN r; END IF;
            fields := '\x';
        ELSE
            fields := webhook._twilio_fields(body);
            IF fields IS NULL THEN r.reason := 'bad_signature'; RETURN r; END IF;
        END IF;
        SELECT array_agg(convert_to(u.form, 'UTF8') || fields ORDER BY u.n) INTO r.prefixes
          FROM unnest(webhook._url_forms(url)) WITH ORDINALITY AS u(form, n);
        r.body_signed := false;
    WHEN 'discord', 'telnyx' THEN
        -- Ed25519 over the timestamp as sent and the body: Discord's in
        -- hex, Telnyx's in base64 with a '|' between (src/schemes/discord.rs,
        -- telnyx.rs).
        sig := CASE s.kind WHEN 'discord' THEN 'x-signature-ed25519' ELSE 'telnyx-signature-ed25519' END;
        family := CASE s.kind WHEN 'discord' THEN 'x-signature-timestamp' ELSE 'telnyx-timestamp' END;
        IF NOT h ? sig THEN r.reason := 'missing_header'; RETURN r; END IF;
        digest := CASE s.kind WHEN 'discord' THEN webhook._hex(h ->> sig, 64) ELSE webhook._base64(h ->> sig, 64) END;
        IF digest IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF NOT h ? family THEN r.reason := 'missing_header'; RETURN r; END IF;
        ts := h ->> family;
        IF webhook._unix_seconds(ts) IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        r.candidates := ARRAY['\x01'::bytea || digest];
        r.prefixes := ARRAY[convert_to(ts || CASE s.kind WHEN 'telnyx' THEN '|' ELSE '' END, 'UTF8')];
        r.signed_at := webhook._unix_seconds(ts);
        r.covered := ARRAY[family];
        RETURN r;
    WHEN 'sendgrid' THEN
        FOREACH entry IN ARRAY ARRAY['x-twilio-email-event-webhook-signature', 'x-twilio-email-event-webhook-timestamp'] LOOP
            IF NOT h ? entry THEN r.reason := 'missing_header'; RETURN r; END IF;
            IF h ->> entry IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        END LOOP;
        ts := h ->> 'x-twilio-email-event-webhook-timestamp';
        sig := h ->> 'x-twilio-email-event-webhook-signature';
        -- A DER P-256 signature is at most 72 bytes, 96 base64 characters.
        IF webhook._unix_seconds(ts) IS NULL OR length(sig) > 96 THEN r.reason := 'malformed_header'; RETURN r; END IF;
        digest := webhook._base64_any(sig);
        IF digest IS NULL OR octet_length(digest) < 8 THEN r.reason := 'malformed_header'; RETURN r; END IF;
        r.candidates := ARRAY['\x02'::bytea || digest];
        r.prefixes := ARRAY[convert_to(ts, 'UTF8')];
        r.signed_at := webhook._unix_seconds(ts);
        r.covered := ARRAY['x-twilio-email-event-webhook-timestamp'];
        RETURN r;
    WHEN 'paypal' THEN
        FOREACH entry IN ARRAY ARRAY['paypal-transmission-id', 'paypal-transmission-time', 'paypal-transmission-sig',
                                      'paypal-cert-url', 'paypal-auth-algo'] LOOP
            IF NOT h ? entry THEN r.reason := 'missing_header'; RETURN r; END IF;
            IF h ->> entry IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        END LOOP;
        id := h ->> 'paypal-transmission-id';
        ts := h ->> 'paypal-transmission-time';
        sig := h ->> 'paypal-transmission-sig';
        -- An RSA-4096 signature is 512 bytes, 684 base64 characters.
        IF lower(h ->> 'paypal-auth-algo') <> 'sha256withrsa' OR webhook._rfc3339(ts) IS NULL
           OR id = '' OR strpos(id, '|') > 0 OR h ->> 'paypal-cert-url' = '' OR length(sig) > 700 THEN
            r.reason := 'malformed_header'; RETURN r;
        END IF;
        digest := webhook._base64_any(sig);
        IF digest IS NULL OR digest = '\x' THEN r.reason := 'malformed_header'; RETURN r; END IF;
        r.candidates := ARRAY['\x03'::bytea || digest];
        r.prefixes := ARRAY[convert_to(id || '|' || ts || '|' || s.webhook_id || '|' || webhook._crc32(body), 'UTF8')];
        r.body_signed := false;
        r.signed_at := webhook._rfc3339(ts);
        r.covered := ARRAY['paypal-transmission-id', 'paypal-transmission-time'];
        r.key_name := h ->> 'paypal-cert-url';
        RETURN r;
    WHEN 'adyen' THEN
        -- The item's signature in the body, over eight of its fields
        -- joined by ':' (src/schemes/adyen.rs).
        doc := webhook._json_or_null(body);
        IF doc IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF (jsonb_typeof(doc) = 'object' AND doc ? 'notificationItems') IS NOT TRUE THEN
            r.reason := 'missing_header'; RETURN r;
        END IF;
        IF jsonb_typeof(doc -> 'notificationItems') <> 'array' THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF jsonb_array_length(doc -> 'notificationItems') <> 1 THEN r.reason := 'malformed_header'; RETURN r; END IF;
        doc := doc #> '{notificationItems,0}';
        IF (jsonb_typeof(doc) = 'object' AND doc ? 'NotificationRequestItem') IS NOT TRUE THEN
            r.reason := 'missing_header'; RETURN r;
        END IF;
        doc := doc -> 'NotificationRequestItem';
        IF jsonb_typeof(doc) <> 'object' THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF (jsonb_typeof(doc -> 'additionalData') = 'object' AND doc -> 'additionalData' ? 'hmacSignature') IS NOT TRUE THEN
            r.reason := 'missing_header'; RETURN r;
        END IF;
        IF jsonb_typeof(doc #> '{additionalData,hmacSignature}') <> 'string' THEN r.reason := 'malformed_header'; RETURN r; END IF;
        digest := webhook._base64(doc #>> '{additionalData,hmacSignature}', 32);
        IF digest IS NULL OR jsonb_typeof(doc -> 'amount') IS DISTINCT FROM 'object' THEN
            r.reason := 'malformed_header'; RETURN r;
        END IF;
        ts := NULL;
        FOREACH entry IN ARRAY ARRAY['pspReference', 'originalReference', 'merchantAccountCode', 'merchantReference',
                                      'amount,value', 'amount,currency', 'eventCode', 'success'] LOOP
            -- A number as its digits, a boolean as true or false, nothing as
            -- empty; anything else is no field Adyen signs.
            method := CASE coalesce(jsonb_typeof(doc #> string_to_array(entry, ',')), 'null')
                          WHEN 'null' THEN ''
                          WHEN 'string' THEN doc #>> string_to_array(entry, ',')
                          WHEN 'boolean' THEN doc #>> string_to_array(entry, ',')
                          WHEN 'number' THEN CASE WHEN (doc #>> string_to_array(entry, ',')) ~ '^-?[0-9]+$'
                                                  THEN doc #>> string_to_array(entry, ',') END
                      END;
            IF method IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
            ts := CASE WHEN ts IS NULL THEN method ELSE ts || ':' || method END;
        END LOOP;
        r.candidates := ARRAY[digest];
        r.prefixes := ARRAY[convert_to(ts, 'UTF8')];
        r.body_signed := false;
        RETURN r;
    WHEN 'aws_sns' THEN
        -- The signature in the body, RSA-SHA256 over a canonical string of
        -- its fields, version 2 only (src/schemes/sns.rs).
        doc := webhook._json_or_null(body);
        IF doc IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
        IF jsonb_typeof(doc) <> 'object' THEN r.reason := 'missing_header'; RETURN r; END IF;
        FOREACH entry IN ARRAY ARRAY['Type', 'SignatureVersion', 'Signature', 'SigningCertURL'] LOOP
            IF NOT doc ? entry THEN r.reason := 'missing_header'; RETURN r; END IF;
            IF jsonb_typeof(doc -> entry) <> 'string' THEN r.reason := 'malformed_header'; RETURN r; END IF;
            IF entry = 'Type' AND doc ->> 'Type' NOT IN ('Notification', 'SubscriptionConfirmation', 'UnsubscribeConfirmation')
               OR entry = 'SignatureVersion' AND doc ->> 'SignatureVersion' <> '2' THEN
                r.reason := 'malformed_header'; RETURN r;
            END IF;
        END LOOP;
        sig := doc ->> 'Signature';
        IF length(sig) > 700 OR doc ->> 'SigningCertURL' = '' THEN r.reason := 'malformed_header'; RETURN r; END IF;
        digest := webhook._base64_any(sig);
        IF digest IS NULL OR digest = '\x' THEN r.reason := 'malformed_header'; RETURN r; END IF;
        ts := '';
        FOREACH entry IN ARRAY CASE doc ->> 'Type'
                                   WHEN 'Notification' THEN ARRAY['Message', 'MessageId', 'Subject', 'Timestamp', 'TopicArn', 'Type']
                                   ELSE ARRAY['Message', 'MessageId', 'SubscribeURL', 'Timestamp', 'Token', 'TopicArn', 'Type'] END LOOP
            CONTINUE WHEN entry = 'Subject' AND coalesce(jsonb_typeof(doc -> 'Subject'), 'null') = 'null';
            IF NOT doc ? entry THEN r.reason := 'missing_header'; RETURN r; END IF;
            IF jsonb_typeof(doc -> entry) <> 'string' THEN r.reason := 'malformed_header'; RETURN r; END IF;
            ts := ts || entry || E'\n' || (doc ->> entry) || E'\n';
        END LOOP;
        r.candidates := ARRAY['\x03'::bytea || digest];
        r.prefixes := ARRAY[convert_to(ts, 'UTF8')];
        r.body_signed := false;
        r.key_name := doc ->> 'SigningCertURL';
        RETURN r;
    ELSE
        -- The generic HMAC of the body in one header.
        IF NOT h ? lower(s.header) THEN r.reason := 'missing_header'; RETURN r; END IF;
        sig := h ->> lower(s.header);
        IF sig IS NULL OR left(sig, length(s.prefix)) <> s.prefix THEN r.reason := 'malformed_header'; RETURN r; END IF;
        sig := substr(sig, length(s.prefix) + 1);
        r.algorithm := s.algorithm;
        digest := CASE WHEN s.base64
                       THEN webhook._base64(sig, CASE s.algorithm WHEN 'sha1' THEN 20 WHEN 'sha512' THEN 64 ELSE 32 END)
                       ELSE webhook._hex(sig, CASE s.algorithm WHEN 'sha1' THEN 20 WHEN 'sha512' THEN 64 ELSE 32 END) END;
    END CASE;
    -- One signature, over the prefix (if any), the body and the suffix.
    IF digest IS NULL THEN r.reason := 'malformed_header'; RETURN r; END IF;
    r.candidates := ARRAY[digest];
    r.prefixes := coalesce(r.prefixes, ARRAY['\x'::bytea]);
    RETURN r;
END
$$;

-- A body as JSON, or NULL where it is not.
CREATE FUNCTION webhook._json_or_null(body bytea) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN convert_from(body, 'UTF8')::jsonb;
EXCEPTION WHEN data_exception OR character_not_in_repertoire OR untranslatable_character THEN
    RETURN NULL;
END
$$;

-- What an authentic delivery proves (src/schemes/mod.rs, Authentic), or
-- why it is refused: `reason` ok or a refusal, `signed_at` whenever it
-- was read.
CREATE TYPE webhook._verdict AS (
    reason      text,
    signed_at   bigint,
    prefix      bytea,    -- the signed bytes before the body, as verified
    body_signed boolean,
    suffix      bytea,
    covered     text[],
    secret      integer   -- which of the secrets verified it (1-based)
);

-- Verify a request: the engine every scheme shares (src/schemes/mod.rs,
-- authenticate). Every signature the request carries is tried against
-- every usable key, the MACs compared in constant time; then the window.
-- read holds, for each secret, its public key as read at registration
-- (webhook._public_keys), or NULL where the secret is read here.
CREATE FUNCTION webhook._authenticate(fn text, s webhook._scheme, headers jsonb, body bytea, url text,
                                      secrets text[], read webhook._key[], tolerance bigint, now bigint)
RETURNS webhook._verdict
LANGUAGE plpgsql VOLATILE PARALLEL SAFE
AS $$
DECLARE
    h       jsonb := webhook._headers(headers);
    signed  webhook._signed;
    v       webhook._verdict;
    keys    webhook._key[] := '{}';
    indexes integer[] := '{}';
    given   integer := 0;
    i       integer;
    key     webhook._key;
    named   webhook._key[];
    named_at integer[];
    public_keys integer := 0;
    prefix  bytea;
    signed_body bytea;
BEGIN
    IF h IS NULL THEN
        v.reason := 'malformed_header';
        RETURN v;
    END IF;
    signed := webhook._read(s, h, body, url);
    v.signed_at := signed.signed_at;
    IF signed.reason IS NOT NULL THEN
        v.reason := signed.reason;
        v.signed_at := NULL;
        RETURN v;
    END IF;
    FOR i IN 1 .. coalesce(cardinality(secrets), 0) LOOP
        CONTINUE WHEN secrets[i] IS NULL OR secrets[i] = '';
        given := given + 1;
        IF given <= 16 THEN
            key := CASE WHEN (read[i]).kind IS NOT NULL THEN read[i] ELSE webhook._scheme_key(s, secrets[i]) END;
            IF key.kind IS NOT NULL THEN
                keys := keys || key;
                indexes := indexes || i;
            END IF;
            IF key.kind <> 'hmac' THEN
                public_keys := public_keys + 1;
            END IF;
        END IF;
    END LOOP;
    IF given = 0 THEN
        v.reason := 'no_secret';
        RETURN v;
    END IF;
    IF cardinality(signed.candidates) > 8 THEN
        v.reason := 'malformed_header';
        RETURN v;
    END IF;
    IF cardinality(keys) = 0 THEN
        v.reason := 'invalid_secret';
        RETURN v;
    END IF;
    IF signed.key_name IS NOT NULL THEN
        -- Only the certificates of the name the request gives.
        named := '{}';
        named_at := '{}';
        public_keys := 0;
        FOR i IN 1 .. cardinality(keys) LOOP
            IF (keys[i]).name = signed.key_name THEN
                named := named || keys[i];
                named_at := named_at || indexes[i];
                public_keys := public_keys + 1;
            END IF;
        END LOOP;
        keys := named;
        indexes := named_at;
        IF cardinality(keys) = 0 THEN
            v.reason := 'unknown_certificate';
            RETURN v;
        END IF;
    END IF;
    -- A public-key check costs a hundred HMACs: at most 16 of them, counted
    -- once PayPal's certificates are narrowed to the one named.
    IF public_keys > 0
       AND (SELECT count(*) FROM unnest(signed.candidates) c
             WHERE s.kind IN ('discord', 'telnyx', 'sendgrid', 'paypal', 'aws_sns') OR octet_length(c) = 65 AND get_byte(c, 0) = 1)
           * public_keys * greatest(cardinality(signed.prefixes), 1) > 16 THEN
        v.reason := 'malformed_header';
        RETURN v;
    END IF;
    signed_body := CASE WHEN signed.body_signed THEN body ELSE '\x' END;
    <<search>>
    FOREACH prefix IN ARRAY signed.prefixes LOOP
        FOR i IN 1 .. cardinality(keys) LOOP
            IF webhook._key_verifies(keys[i], signed.candidates, prefix || signed_body || signed.suffix,
                                     signed.algorithm) THEN
                v.secret := indexes[i];
                v.prefix := prefix;
                EXIT search;
            END IF;
        END LOOP;
    END LOOP;
    IF v.secret IS NULL THEN
        v.reason := 'bad_signature';
        RETURN v;
    END IF;
    IF signed.signed_at IS NOT NULL AND signed.signed_at < now - tolerance THEN
        v.reason := 'timestamp_too_old';
    ELSIF signed.signed_at IS NOT NULL AND signed.signed_at > now + tolerance THEN
        v.reason := 'timestamp_in_future';
    ELSE
        v.reason := 'ok';
    END IF;
    v.body_signed := signed.body_signed;
    v.suffix := signed.suffix;
    v.covered := signed.covered;
    RETURN v;
END
$$;

-- The arguments webhook_verify and webhook_verify_detail share, checked
-- as the compiled edition checks them, then the verdict.
CREATE FUNCTION webhook._verify(fn text, scheme text, headers jsonb, body bytea, secrets text[],
                                tolerance interval, url text)
RETURNS webhook._verdict
LANGUAGE plpgsql VOLATILE PARALLEL SAFE
AS $$
DECLARE
    s    webhook._scheme := webhook._parse_scheme(fn, 'scheme', webhook._required(fn, 'scheme', scheme));
    secs bigint;
BEGIN
    PERFORM webhook._required(fn, 'headers', headers);
    PERFORM webhook._required(fn, 'body', body);
    PERFORM webhook._payload_size(fn, 'body', length(body));
    PERFORM webhook._required(fn, 'secrets', secrets);
    IF cardinality(secrets) > 16 THEN
        PERFORM webhook._raise('22023', format('%s: argument "secrets" must hold at most 16 keys', fn));
    END IF;
    PERFORM webhook._url(fn, 'url', url);
    IF tolerance IS NULL THEN
        secs := coalesce(s.tolerance, 0);
    ELSIF tolerance <= interval '0' THEN
        PERFORM webhook._raise('22023', format('%s: argument "tolerance" must be a positive interval', fn));
    ELSE
        secs := floor(extract(epoch FROM tolerance))::bigint;
    END IF;
    RETURN webhook._authenticate(fn, s, headers, body, url, secrets, NULL, secs,
                                 floor(extract(epoch FROM clock_timestamp()))::bigint);
END
$$;

-- The public URL a provider called: absolute http:// or https://, at most
-- 8 kB, no whitespace or control characters.
CREATE FUNCTION webhook._url(fn text, arg text, url text) RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF url IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM webhook._bounded_text(fn, arg, url, 8192);
    IF url !~* '^https?://.' OR url ~ '[[:space:][:cntrl:]]' THEN
        PERFORM webhook._raise('22023',
            format('%s: argument "%s" must be the absolute http:// or https:// URL the provider called, as it called it', fn, arg));
    END IF;
    RETURN url;
END
$$;

CREATE FUNCTION @extschema@.webhook_verify(scheme text, headers jsonb, body bytea, secrets text[],
                                           tolerance interval DEFAULT NULL, url text DEFAULT NULL)
RETURNS boolean
LANGUAGE sql VOLATILE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN (webhook._verify('webhook_verify', scheme, headers, body, secrets, tolerance, url)).reason = 'ok';

CREATE FUNCTION @extschema@.webhook_verify(scheme text, headers jsonb, body text, secrets text[],
                                           tolerance interval DEFAULT NULL, url text DEFAULT NULL)
RETURNS boolean
LANGUAGE sql VOLATILE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN (webhook._verify('webhook_verify', scheme, headers, convert_to(body, 'UTF8'), secrets, tolerance, url)).reason = 'ok';

CREATE FUNCTION @extschema@.webhook_verify_detail(scheme text, headers jsonb, body bytea, secrets text[],
                                                  tolerance interval DEFAULT NULL, url text DEFAULT NULL)
RETURNS TABLE (valid boolean, reason text, signed_at timestamptz)
LANGUAGE sql VOLATILE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT v.reason = 'ok', v.reason, to_timestamp(v.signed_at)
      FROM webhook._verify('webhook_verify_detail', scheme, headers, body, secrets, tolerance, url) v;
END;

CREATE FUNCTION @extschema@.webhook_verify_detail(scheme text, headers jsonb, body text, secrets text[],
                                                  tolerance interval DEFAULT NULL, url text DEFAULT NULL)
RETURNS TABLE (valid boolean, reason text, signed_at timestamptz)
LANGUAGE sql VOLATILE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT v.reason = 'ok', v.reason, to_timestamp(v.signed_at)
      FROM webhook._verify('webhook_verify_detail', scheme, headers, convert_to(body, 'UTF8'),
                           secrets, tolerance, url) v;
END;

CREATE FUNCTION @extschema@.webhook_schemes()
RETURNS TABLE (scheme text, aliases text[], event_id_from text, event_type_from text,
               event_id_signed boolean, event_type_signed boolean, tolerance interval, signs text,
               entity_key_from text, order_from text, body_covered text, headers_covered text[])
LANGUAGE sql IMMUTABLE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT c.scheme, c.aliases, c.event_id_from, c.event_type_from,
           webhook._covers(c.body_covered, c.headers_covered, c.event_id_from),
           webhook._covers(c.body_covered, c.headers_covered, c.event_type_from),
           make_interval(secs => c.tolerance), c.signs, c.entity_key_from, c.order_from,
           c.body_covered, c.headers_covered
      FROM webhook._catalog() c;
END;

CREATE FUNCTION @extschema@.webhook_source_signed(scheme text, source text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s webhook._scheme := webhook._parse_scheme('webhook_source_signed', 'scheme', scheme);
BEGIN
    RETURN webhook._covers(s.body_covered, s.headers_covered, source);
END
$$;

CREATE FUNCTION @extschema@.webhook_check_key(scheme text, key text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s webhook._scheme := webhook._parse_scheme('webhook_check_key', 'scheme', scheme);
BEGIN
    IF (webhook._scheme_key(s, key)).kind IS NOT NULL THEN
        RETURN NULL;
    END IF;
    RETURN CASE s.kind
        WHEN 'standard' THEN 'a Standard Webhooks key is whsec_ + base64 of the secret (or v1,whsec_…, as Supabase shows it), or whpk_ + base64 of a 32-byte Ed25519 public key'
        WHEN 'discord' THEN 'a Discord key is the application''s public key, 64 hex digits'
        WHEN 'telnyx' THEN 'a Telnyx key is the account''s public key as Mission Control shows it, base64 of its 32 bytes'
        WHEN 'sendgrid' THEN 'a SendGrid key is the verification key it shows (base64 of a DER P-256 public key), or that key in PEM'
        WHEN 'paypal' THEN 'a PayPal key is the certificate''s URL (as PAYPAL-CERT-URL names it) on the first line, then the PEM certificate'
        WHEN 'adyen' THEN 'an Adyen key is the HMAC key the Customer Area shows, in hex'
        WHEN 'aws_sns' THEN 'an SNS key is the signing certificate''s URL (as SigningCertURL names it) on the first line, then the PEM certificate'
        ELSE 'not a key for this scheme'
    END;
END
$$;

-- An HMAC algorithm's name as the compiled edition reads it (sha256 or
-- sha-256, any case); NULL for one it does not know.
CREATE FUNCTION webhook._algorithm(name text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE lower(name)
           WHEN 'sha256' THEN 'sha256' WHEN 'sha-256' THEN 'sha256'
           WHEN 'sha1' THEN 'sha1' WHEN 'sha-1' THEN 'sha1'
           WHEN 'sha512' THEN 'sha512' WHEN 'sha-512' THEN 'sha512'
       END;

-- verify_hmac: one HMAC of the raw body, hex or base64, optionally
-- labelled with its algorithm ("sha256=…").
CREATE FUNCTION @extschema@.verify_hmac(secret text, payload bytea, signature text, algorithm text DEFAULT 'sha256')
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fn CONSTANT text := 'verify_hmac';
    algo    text;
    len     integer;
    trimmed text;
    label   text;
    digest  bytea;
BEGIN
    IF webhook._required(fn, 'secret', secret) = '' THEN
        PERFORM webhook._raise('2200F', format('%s: argument "secret" must not be empty', fn));
    END IF;
    PERFORM webhook._required(fn, 'payload', payload);
    PERFORM webhook._required(fn, 'signature', signature);
    algo := webhook._algorithm(webhook._required(fn, 'algorithm', algorithm));
    IF algo IS NULL THEN
        PERFORM webhook._raise('42704', format('%s: argument "algorithm": unknown HMAC algorithm "%s"', fn, algorithm),
            NULL, 'Use one of: sha256, sha1, sha512.');
    END IF;
    len := CASE algo WHEN 'sha1' THEN 20 WHEN 'sha512' THEN 64 ELSE 32 END;
    trimmed := btrim(signature, E' \t\n\r\f\u000b');
    label := substring(trimmed FROM '^([A-Za-z0-9-]+)=');
    IF webhook._algorithm(label) IS NOT NULL THEN
        IF webhook._algorithm(label) <> algo THEN
            PERFORM webhook._raise('22P02', format('%s: argument "signature" is not a well-formed signature', fn),
                format('The signature is labelled "%s" but the algorithm is "%s".', webhook._algorithm(label), algo),
                'Give the digest as hex or base64, optionally prefixed with the algorithm ("sha256=...").');
        END IF;
        trimmed := substr(trimmed, length(label) + 2);
    END IF;
    digest := coalesce(webhook._hex(trimmed, len), webhook._base64(trimmed, len));
    IF digest IS NULL THEN
        PERFORM webhook._raise('22P02', format('%s: argument "signature" is not a well-formed signature', fn),
            format('A %s signature is %s hex characters or %s base64 characters; got %s characters.',
                   algo, len * 2, (len + 2) / 3 * 4, length(trimmed)),
            'Give the digest as hex or base64, optionally prefixed with the algorithm ("sha256=...").');
    END IF;
    RETURN webhook._same_mac(digest, webhook._hmac(payload, convert_to(secret, 'UTF8'), algo));
END
$$;

CREATE FUNCTION @extschema@.verify_hmac(secret text, payload text, signature text, algorithm text DEFAULT 'sha256')
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.verify_hmac(secret, convert_to(payload, 'UTF8'), signature, algorithm);

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
