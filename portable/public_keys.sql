-- pg_webhook_inbox, portable edition: public-key signatures (the compiled
-- edition's src/schemes/keys.rs), in PL/pgSQL on numeric, with the
-- server's own sha256() and sha512(): Ed25519 (Discord, Standard Webhooks
-- v1a), ECDSA P-256 with SHA-256 (SendGrid) and RSASSA-PKCS1-v1_5 with
-- SHA-256 (PayPal), and the key forms they are registered in.
--
-- Each check accepts exactly what the compiled edition's RustCrypto
-- implementation accepts (ed25519-dalek's verify_strict, p256, rsa), and
-- the suites hold the two to the same vectors. Signatures and public keys
-- are public data: nothing here is secret, so the arithmetic need not run
-- in constant time. Every loop is bounded by the size of the key (at most
-- 4096 bits), whatever a request says, and every statement of it can be
-- cancelled.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- Big-endian bytes as a non-negative integer, seven bytes at a time.
CREATE FUNCTION webhook._int(b bytea) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    n     numeric := 0;
    len   CONSTANT integer := octet_length(b);
    first CONSTANT integer := len % 7;
    at    integer;
BEGIN
    IF first > 0 THEN
        n := ('x' || lpad(encode(substr(b, 1, first), 'hex'), 16, '0'))::bit(64)::bigint;
    END IF;
    at := first + 1;
    WHILE at <= len LOOP
        n := n * 72057594037927936 + ('x00' || encode(substr(b, at, 7), 'hex'))::bit(64)::bigint;
        at := at + 7;
    END LOOP;
    RETURN n;
END
$$;

-- A non-negative integer as exactly len big-endian bytes; NULL when it
-- does not fit.
CREATE FUNCTION webhook._bytes(n numeric, len integer) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    chunks text[] := '{}';
BEGIN
    IF n < 0 OR n <> trunc(n) THEN
        RETURN NULL;
    END IF;
    WHILE n > 0 LOOP
        chunks := lpad(to_hex(mod(n, 72057594037927936)::bigint), 14, '0') || chunks;
        n := div(n, 72057594037927936);
    END LOOP;
    RETURN CASE WHEN length(ltrim(array_to_string(chunks, ''), '0')) <= 2 * len
                THEN decode(lpad(ltrim(array_to_string(chunks, ''), '0'), 2 * len, '0'), 'hex') END;
END
$$;

-- The bytes in the opposite order (Ed25519's integers are little-endian).
CREATE FUNCTION webhook._reversed(b bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (SELECT decode(coalesce(string_agg(substr(h, 2 * i + 1, 2), '' ORDER BY i DESC), ''), 'hex')
          FROM (SELECT encode(b, 'hex') AS h) x, generate_series(0, octet_length(b) - 1) AS i);

-- A non-negative integer as bits, most significant first, exactly n of
-- them ('0' and '1').
CREATE FUNCTION webhook._bits(v numeric, n integer) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN right((('x' || encode(webhook._bytes(v, (n + 7) / 8), 'hex'))::bit varying)::text, n);

-- base^exp mod m, exp >= 0: left to right over exp's bits, so that
-- RSA's 65537 costs sixteen squarings and one multiplication.
CREATE FUNCTION webhook._modpow(base numeric, exp numeric, m numeric) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    b numeric := mod(mod(base, m) + m, m);
    r numeric;
    bits text;
BEGIN
    IF exp = 0 THEN
        RETURN mod(1, m);
    END IF;
    bits := ltrim(webhook._bits(exp, (length(trunc(exp)::text) * 10 + 2) / 3 + 1), '0');
    r := b;
    FOR i IN 2 .. length(bits) LOOP
        r := mod(r * r, m);
        IF substr(bits, i, 1) = '1' THEN
            r := mod(r * b, m);
        END IF;
    END LOOP;
    RETURN r;
END
$$;

-- The inverse of a modulo m (extended Euclid); NULL when there is none.
CREATE FUNCTION webhook._modinv(a numeric, m numeric) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    r0 numeric := m;
    r1 numeric := mod(mod(a, m) + m, m);
    t0 numeric := 0;
    t1 numeric := 1;
    q  numeric;
    t  numeric;
BEGIN
    WHILE r1 <> 0 LOOP
        q := div(r0, r1);
        t := r0 - q * r1; r0 := r1; r1 := t;
        t := t0 - q * t1; t0 := t1; t1 := t;
    END LOOP;
    RETURN CASE WHEN r0 = 1 THEN mod(t0 + m, m) END;
END
$$;

-- ---------------------------------------------------------------------
-- Ed25519 (RFC 8032), as ed25519-dalek's verify_strict accepts it.

-- A point's encoding read as curve25519-dalek reads it: y is the low 255
-- bits taken modulo p (a y of p or more is accepted, reduced), the top bit
-- is x's sign (a sign bit on x = 0 is accepted); {x, y}, or NULL when y is
-- no point's.
CREATE FUNCTION webhook._ed25519_point(encoded bytea) RETURNS numeric[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    p CONSTANT numeric := 57896044618658097711785492504343953926634992332820282019728792003956564819949;
    d CONSTANT numeric := 37095705934669439343138083508754565189542113879843219016388785533085940283555;
    sqrt_m1 CONSTANT numeric := 19681161376707505956807079304988542015446066515923890162744021073123829784752;
    top CONSTANT numeric := 57896044618658097711785492504343953926634992332820282019728792003956564819968; -- 2^255
    v numeric;
    negative boolean;
    y numeric;
    u numeric;
    w numeric;
    x numeric;
    check_ numeric;
BEGIN
    IF octet_length(encoded) <> 32 THEN
        RETURN NULL;
    END IF;
    v := webhook._int(webhook._reversed(encoded));
    negative := v >= top;
    y := mod(CASE WHEN negative THEN v - top ELSE v END, p);
    u := mod(y * y - 1 + p, p);
    w := mod(d * y * y + 1, p);
    -- x = u w^3 (u w^7)^((p-5)/8), then fixed up by sqrt(-1) when needed.
    x := mod(u * webhook._modpow(w, 3, p), p);
    x := mod(x * webhook._modpow(mod(u * webhook._modpow(w, 7, p), p),
                                 7237005577332262213973186563042994240829374041602535252466099000494570602493, p), p);
    check_ := mod(w * x * x, p);
    IF check_ = u THEN
        NULL;
    ELSIF check_ = mod(p - u, p) THEN
        x := mod(x * sqrt_m1, p);
    ELSE
        RETURN NULL;
    END IF;
    -- The even root, negated when the sign bit says so.
    IF mod(x, 2) = 1 THEN
        x := p - x;
    END IF;
    IF negative THEN
        x := mod(p - x, p);
    END IF;
    RETURN ARRAY[x, y];
END
$$;

-- Whether a point (affine {x, y}) has a small order: [8]P is the identity.
CREATE FUNCTION webhook._ed25519_small_order(pt numeric[]) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    p CONSTANT numeric := 57896044618658097711785492504343953926634992332820282019728792003956564819949;
    x numeric := pt[1];
    y numeric := pt[2];
    z numeric := 1;
    a numeric; b numeric; c numeric; e numeric; f numeric; g numeric; h numeric;
BEGIN
    FOR i IN 1 .. 3 LOOP
        a := mod(x * x, p); b := mod(y * y, p); c := mod(2 * z * z, p);
        h := a + b; e := mod(h - (x + y) * (x + y), p); g := a - b; f := c + g;
        x := mod(e * f, p); y := mod(g * h, p); z := mod(f * g, p);
    END LOOP;
    RETURN mod(x, p) = 0 AND mod(y - z, p) = 0;
END
$$;

-- Whether sig (R ‖ S, 64 bytes) is key's Ed25519 signature of message,
-- under verify_strict's rules: S below the group order, neither key nor
-- R of small order, R as encoded equal to the canonical encoding of
-- [S]B - [k]A (so a non-canonical R is refused). A key that is no point
-- is NULL (the caller's invalid key), any other failure false. point is
-- the key decoded, when the caller has it (a registered key is decoded
-- once, when it is registered: the decoding is a tenth of the check).
CREATE FUNCTION webhook._ed25519_verify(key bytea, sig bytea, message bytea, point numeric[] DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    p  CONSTANT numeric := 57896044618658097711785492504343953926634992332820282019728792003956564819949;
    d2 CONSTANT numeric := 16295367250680780974490674513165176452449235426866156013048779062215315747161;
    l  CONSTANT numeric := 7237005577332262213973186563042994240857116359379907606001950938285454250989;
    base_x CONSTANT numeric := 15112221349535400772501151409588531511454012693041857206046113283949847762202;
    base_y CONSTANT numeric := 46316835694926478169428394003475163141307993866256225615783033603165251855960;
    a  numeric[];
    r  numeric[];
    s  numeric;
    k  numeric;
    sb text;
    kb text;
    -- The three points added: B, -A and B - A, each as (Y-X, Y+X, 2dT, 2Z).
    ym numeric[]; yp numeric[]; t2 numeric[]; z2 numeric[];
    ax numeric; ay numeric;
    x numeric := 0; y numeric := 1; z numeric := 1; t numeric := 0;
    qa numeric; qb numeric; qc numeric; qd numeric; qe numeric; qf numeric; qg numeric; qh numeric;
    j integer;
    zi numeric;
    ex numeric; ey numeric;
BEGIN
    IF key IS NULL OR sig IS NULL OR message IS NULL THEN
        RETURN NULL;
    END IF;
    a := coalesce(point, webhook._ed25519_point(key));
    IF a IS NULL THEN
        RETURN NULL;
    END IF;
    IF octet_length(sig) <> 64 THEN
        RETURN false;
    END IF;
    s := webhook._int(webhook._reversed(substr(sig, 33, 32)));
    IF s >= l THEN
        RETURN false;
    END IF;
    r := webhook._ed25519_point(substr(sig, 1, 32));
    IF r IS NULL OR webhook._ed25519_small_order(r) OR webhook._ed25519_small_order(a) THEN
        RETURN false;
    END IF;
    k := mod(webhook._int(webhook._reversed(sha512(substr(sig, 1, 32) || key || message))), l);
    -- -A, then B + (-A) by the addition below with both Z = 1.
    ax := mod(p - a[1], p); ay := a[2];
    -- Unified addition of B and -A (extended coordinates, Z = 1).
    qa := mod((base_y - base_x) * (ay - ax), p);
    qb := mod((base_y + base_x) * (ay + ax), p);
    qc := mod(base_x * base_y * d2 * ax * ay, p);
    qd := 2;
    qe := qb - qa; qf := qd - qc; qg := qd + qc; qh := qb + qa;
    -- B - A is (E F, G H, E H, F G); its (Y-X, Y+X, 2dT, 2Z):
    ym := ARRAY[mod(base_y - base_x, p), mod(ay - ax, p), mod(qg * qh - qe * qf, p)];
    yp := ARRAY[mod(base_y + base_x, p), mod(ay + ax, p), mod(qg * qh + qe * qf, p)];
    t2 := ARRAY[mod(d2 * base_x * base_y, p), mod(d2 * ax * ay, p), mod(d2 * mod(qe * qh, p), p)];
    z2 := ARRAY[2, 2, mod(2 * qf * qg, p)];
    sb := webhook._bits(s, 253);
    kb := webhook._bits(k, 253);
    FOR i IN 1 .. 253 LOOP
        -- Double.
        qa := mod(x * x, p); qb := mod(y * y, p); qc := mod(2 * z * z, p);
        qh := qa + qb; qe := mod(qh - (x + y) * (x + y), p); qg := qa - qb; qf := qc + qg;
        x := mod(qe * qf, p); y := mod(qg * qh, p); t := mod(qe * qh, p); z := mod(qf * qg, p);
        -- Add B, -A or both, as the bits of S and k say.
        j := CASE WHEN substr(sb, i, 1) = '1' THEN 1 ELSE 0 END
           + CASE WHEN substr(kb, i, 1) = '1' THEN 2 ELSE 0 END;
        IF j > 0 THEN
            qa := mod((y - x) * ym[j], p); qb := mod((y + x) * yp[j], p);
            qc := mod(t * t2[j], p); qd := mod(z * z2[j], p);
            qe := qb - qa; qf := qd - qc; qg := qd + qc; qh := qb + qa;
            x := mod(qe * qf, p); y := mod(qg * qh, p); t := mod(qe * qh, p); z := mod(qf * qg, p);
        END IF;
    END LOOP;
    zi := webhook._modinv(z, p);
    IF zi IS NULL THEN
        RETURN false;
    END IF;
    ex := mod(mod(x * zi, p) + p, p);
    ey := mod(mod(y * zi, p) + p, p);
    RETURN webhook._reversed(webhook._bytes(ey + mod(ex, 2) * 57896044618658097711785492504343953926634992332820282019728792003956564819968, 32))
           = substr(sig, 1, 32);
END
$$;

-- ---------------------------------------------------------------------
-- ECDSA over P-256 with SHA-256, as the p256 crate accepts it.

-- A DER signature, SEQUENCE { INTEGER r, INTEGER s }, in strict DER (the
-- shortest lengths, no padding byte but the one a high bit needs, nothing
-- after it), each in [1, n - 1]: {r, s}, or NULL for anything else. Both
-- halves of s are accepted, as p256 accepts them.
CREATE FUNCTION webhook._p256_der(sig bytea) RETURNS numeric[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    n CONSTANT numeric := 115792089210356248762697446949407573529996955224135760342422259061068512044369;
    total CONSTANT integer := octet_length(sig);
    at integer := 3;
    len integer;
    v numeric;
    out numeric[] := '{}';
BEGIN
    IF total < 8 OR total > 72 OR get_byte(sig, 0) <> 48 OR get_byte(sig, 1) <> total - 2 THEN
        RETURN NULL;
    END IF;
    FOR half IN 1 .. 2 LOOP
        IF at + 1 > total OR get_byte(sig, at - 1) <> 2 THEN
            RETURN NULL;
        END IF;
        len := get_byte(sig, at);
        IF len = 0 OR len > 33 OR at + 1 + len > total THEN
            RETURN NULL;
        END IF;
        -- Negative, or padded without need.
        IF get_byte(sig, at + 1) >= 128
           OR len > 1 AND get_byte(sig, at + 1) = 0 AND get_byte(sig, at + 2) < 128
           OR len = 33 AND get_byte(sig, at + 1) <> 0 THEN
            RETURN NULL;
        END IF;
        v := webhook._int(substr(sig, at + 2, len));
        IF v < 1 OR v >= n THEN
            RETURN NULL;
        END IF;
        out := out || v;
        at := at + 2 + len;
    END LOOP;
    RETURN CASE WHEN at = total + 1 THEN out END;
END
$$;

-- A P-256 public key as a DER SubjectPublicKeyInfo (id-ecPublicKey,
-- prime256v1), its point uncompressed or compressed: {x, y}, or NULL when
-- it is not one, or not on the curve.
CREATE FUNCTION webhook._p256_key(der bytea) RETURNS numeric[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    p CONSTANT numeric := 115792089210356248762697446949407573530086143415290314195533631308867097853951;
    b CONSTANT numeric := 41058363725152142129326129780047268409114441015993725554835256314039467401291;
    algorithm CONSTANT bytea := '\x301306072a8648ce3d020106082a8648ce3d030107';
    x numeric;
    y numeric;
    rhs numeric;
BEGIN
    IF octet_length(der) = 91 AND substr(der, 1, 2) = '\x3059' AND substr(der, 3, 21) = algorithm
       AND substr(der, 24, 4) = '\x03420004' THEN
        x := webhook._int(substr(der, 28, 32));
        y := webhook._int(substr(der, 60, 32));
    ELSIF octet_length(der) = 59 AND substr(der, 1, 2) = '\x3039' AND substr(der, 3, 21) = algorithm
          AND substr(der, 24, 3) = '\x032200' AND get_byte(der, 26) IN (2, 3) THEN
        x := webhook._int(substr(der, 28, 32));
        IF x >= p THEN
            RETURN NULL;
        END IF;
        rhs := mod(x * x * x - 3 * x + b, p);
        rhs := mod(rhs + p, p);
        -- p = 3 mod 4: the square root is rhs^((p+1)/4).
        y := webhook._modpow(rhs, div(p + 1, 4), p);
        IF mod(y * y, p) <> rhs THEN
            RETURN NULL;
        END IF;
        IF mod(y, 2) <> get_byte(der, 26) - 2 THEN
            y := p - y;
        END IF;
    ELSE
        RETURN NULL;
    END IF;
    IF x >= p OR y >= p OR mod(y * y - (x * x * x - 3 * x + b), p) <> 0 THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY[x, y];
END
$$;

-- Whether der_sig is the ECDSA P-256 signature of SHA-256(message) under
-- the public key {qx, qy}: u1 G + u2 Q by one pass over both scalars
-- (Jacobian coordinates, G, Q and G + Q added in affine form).
CREATE FUNCTION webhook._p256_verify(key numeric[], der_sig bytea, message bytea) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    p  CONSTANT numeric := 115792089210356248762697446949407573530086143415290314195533631308867097853951;
    n  CONSTANT numeric := 115792089210356248762697446949407573529996955224135760342422259061068512044369;
    gx CONSTANT numeric := 48439561293906451759052585252797914202762949526041747995844080717082404635286;
    gy CONSTANT numeric := 36134250956749795798585127919587881956611106672985015071877198253568414405109;
    rs numeric[];
    w  numeric;
    u1 numeric;
    u2 numeric;
    b1 text;
    b2 text;
    px numeric[];
    py numeric[];
    lam numeric;
    j  integer;
    x  numeric := 1; y numeric := 1; z numeric := 0;
    delta numeric; gamma numeric; beta numeric; alpha numeric;
    zz numeric; u numeric; s2 numeric; h numeric; hh numeric; i4 numeric; jj numeric; rr numeric; v numeric;
    ax numeric;
BEGIN
    rs := webhook._p256_der(der_sig);
    IF rs IS NULL THEN
        RETURN false;
    END IF;
    w := webhook._modinv(rs[2], n);
    u1 := mod(mod(webhook._int(sha256(message)), n) * w, n);
    u2 := mod(rs[1] * w, n);
    -- G, Q and G + Q (NULL when Q = -G: adding it adds nothing).
    px := ARRAY[gx, key[1], NULL];
    py := ARRAY[gy, key[2], NULL];
    IF gx <> key[1] THEN
        lam := mod(mod(key[2] - gy, p) * webhook._modinv(key[1] - gx, p), p);
        px[3] := mod(mod(lam * lam - gx - key[1], p) + p, p);
        py[3] := mod(mod(lam * (gx - px[3]) - gy, p) + p, p);
    ELSIF gy = key[2] THEN
        lam := mod(mod(3 * gx * gx - 3, p) * webhook._modinv(2 * gy, p), p);
        px[3] := mod(mod(lam * lam - 2 * gx, p) + p, p);
        py[3] := mod(mod(lam * (gx - px[3]) - gy, p) + p, p);
    END IF;
    b1 := webhook._bits(u1, 256);
    b2 := webhook._bits(u2, 256);
    -- The doubling is written out here and again below, where a point
    -- meets itself: a function call per step would cost a quarter of the
    -- check.
    FOR i IN 1 .. 256 LOOP
        IF z <> 0 THEN
            -- Double (a = -3).
            delta := mod(z * z, p); gamma := mod(y * y, p); beta := mod(x * gamma, p);
            alpha := mod(3 * (x - delta) * (x + delta), p);
            x := mod(alpha * alpha - 8 * beta, p);
            z := mod((y + z) * (y + z) - gamma - delta, p);
            y := mod(alpha * (4 * beta - x) - 8 * gamma * gamma, p);
        END IF;
        j := CASE WHEN substr(b1, i, 1) = '1' THEN 1 ELSE 0 END
           + CASE WHEN substr(b2, i, 1) = '1' THEN 2 ELSE 0 END;
        CONTINUE WHEN j = 0 OR px[j] IS NULL;
        IF mod(z, p) = 0 THEN
            x := px[j]; y := py[j]; z := 1;
            CONTINUE;
        END IF;
        -- Add an affine point (madd-2007-bl).
        zz := mod(z * z, p); u := mod(px[j] * zz, p); s2 := mod(py[j] * z * zz, p);
        h := mod(u - x, p); rr := mod(2 * (s2 - y), p);
        IF h = 0 THEN
            IF rr = 0 THEN
                -- The same point: double it instead.
                delta := mod(z * z, p); gamma := mod(y * y, p); beta := mod(x * gamma, p);
                alpha := mod(3 * (x - delta) * (x + delta), p);
                x := mod(alpha * alpha - 8 * beta, p);
                z := mod((y + z) * (y + z) - gamma - delta, p);
                y := mod(alpha * (4 * beta - x) - 8 * gamma * gamma, p);
            ELSE
                z := 0;
            END IF;
            CONTINUE;
        END IF;
        hh := mod(h * h, p); i4 := mod(4 * hh, p); jj := mod(h * i4, p); v := mod(x * i4, p);
        ax := mod(rr * rr - jj - 2 * v, p);
        y := mod(rr * (v - ax) - 2 * y * jj, p);
        z := mod((z + h) * (z + h) - zz - hh, p);
        x := ax;
    END LOOP;
    IF mod(z, p) = 0 THEN
        RETURN false;
    END IF;
    zz := webhook._modinv(mod(z * z, p), p);
    ax := mod(mod(x * zz, p) + p, p);
    RETURN mod(ax, n) = rs[1];
END
$$;

-- ---------------------------------------------------------------------
-- RSASSA-PKCS1-v1_5 with SHA-256, as the rsa crate accepts it.

-- Whether sig is the signature of SHA-256(message) under the key {n, e,
-- the length of n in bytes}:
-- as long as the modulus, below it, and s^e mod n exactly the encoding
-- 00 01 FF…FF 00 DigestInfo(SHA-256) hash.
CREATE FUNCTION webhook._rsa_verify(key numeric[], sig bytea, message bytea) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    -- The modulus's length in bytes, as the key was read with it.
    k CONSTANT integer := key[3];
    s numeric;
BEGIN
    IF octet_length(sig) <> k OR k < 62 THEN
        RETURN false;
    END IF;
    s := webhook._int(sig);
    IF s >= key[1] THEN
        RETURN false;
    END IF;
    -- Compared as integers: reading 256 bytes into one costs a quarter of
    -- writing one out as bytes.
    RETURN webhook._modpow(s, key[2], key[1])
         = webhook._int('\x0001'::bytea || decode(repeat('ff', k - 54), 'hex')
                        || '\x003031300d060960864801650304020105000420'::bytea || sha256(message));
END
$$;

-- One DER element at a 1-based offset: {tag, where its content starts,
-- its content's length}, or NULL when it runs past the end or its length
-- is not in DER's shortest form.
CREATE FUNCTION webhook._der_at(der bytea, at integer) RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    total CONSTANT integer := octet_length(der);
    first integer;
    len bigint := 0;
    octets integer := 0;
BEGIN
    IF at < 1 OR at + 1 > total THEN
        RETURN NULL;
    END IF;
    first := get_byte(der, at);
    IF first < 128 THEN
        len := first;
    ELSE
        octets := first - 128;
        IF octets < 1 OR octets > 3 OR at + 1 + octets > total OR get_byte(der, at + 1) = 0 THEN
            RETURN NULL;
        END IF;
        FOR i IN 1 .. octets LOOP
            len := len * 256 + get_byte(der, at + i);
        END LOOP;
        IF len < 128 THEN
            RETURN NULL;
        END IF;
    END IF;
    IF at + 2 + octets + len - 1 > total THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY[get_byte(der, at - 1), at + 2 + octets, len::integer];
END
$$;

-- A DER INTEGER's content as a positive integer (DER's shortest form);
-- NULL when it is zero, negative or padded without need.
CREATE FUNCTION webhook._der_uint(content bytea) RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE WHEN octet_length(content) > 0 AND get_byte(content, 0) < 128
             AND NOT (octet_length(content) > 1 AND get_byte(content, 0) = 0 AND get_byte(content, 1) < 128)
             AND webhook._int(content) > 0
            THEN webhook._int(content) END;

-- The RSA public key {n, e, n's length in bytes} of an X.509 certificate
-- in DER: the walk from
-- the certificate to its subjectPublicKeyInfo, rsaEncryption, a modulus
-- of at most 4096 bits and an exponent from 2 to 2^33 - 1 (the rsa
-- crate's bounds). NULL for anything else.
CREATE FUNCTION webhook._rsa_certificate_key(der bytea) RETURNS numeric[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    el  integer[];
    tbs integer[];
    at  integer;
    stop integer;
    spki integer[];
    alg integer[];
    bits integer[];
    seq integer[];
    n_el integer[];
    e_el integer[];
    n numeric;
    e numeric;
BEGIN
    el := webhook._der_at(der, 1);
    IF el IS NULL OR el[1] <> 48 OR el[2] + el[3] - 1 <> octet_length(der) THEN
        RETURN NULL;
    END IF;
    tbs := webhook._der_at(der, el[2]);
    IF tbs IS NULL OR tbs[1] <> 48 THEN
        RETURN NULL;
    END IF;
    at := tbs[2];
    stop := tbs[2] + tbs[3];
    el := webhook._der_at(der, at);
    IF el IS NOT NULL AND el[1] = 160 THEN  -- [0] version
        at := el[2] + el[3];
        el := webhook._der_at(der, at);
    END IF;
    -- serialNumber, signature, issuer, validity, subject.
    FOR i IN 1 .. 5 LOOP
        IF el IS NULL OR el[1] <> (CASE WHEN i = 1 THEN 2 ELSE 48 END) OR el[2] + el[3] > stop THEN
            RETURN NULL;
        END IF;
        at := el[2] + el[3];
        el := webhook._der_at(der, at);
    END LOOP;
    spki := el;
    IF spki IS NULL OR spki[1] <> 48 OR spki[2] + spki[3] > stop THEN
        RETURN NULL;
    END IF;
    alg := webhook._der_at(der, spki[2]);
    IF alg IS NULL OR alg[1] <> 48
       OR substr(der, alg[2], alg[3]) NOT IN ('\x06092a864886f70d010101'::bytea, '\x06092a864886f70d0101010500'::bytea) THEN
        RETURN NULL;
    END IF;
    bits := webhook._der_at(der, alg[2] + alg[3]);
    IF bits IS NULL OR bits[1] <> 3 OR bits[2] + bits[3] <> spki[2] + spki[3] OR bits[3] < 2
       OR get_byte(der, bits[2] - 1) <> 0 THEN
        RETURN NULL;
    END IF;
    seq := webhook._der_at(der, bits[2] + 1);
    IF seq IS NULL OR seq[1] <> 48 OR seq[2] + seq[3] <> bits[2] + bits[3] THEN
        RETURN NULL;
    END IF;
    n_el := webhook._der_at(der, seq[2]);
    IF n_el IS NULL OR n_el[1] <> 2 THEN
        RETURN NULL;
    END IF;
    e_el := webhook._der_at(der, n_el[2] + n_el[3]);
    IF e_el IS NULL OR e_el[1] <> 2 OR e_el[2] + e_el[3] <> seq[2] + seq[3] THEN
        RETURN NULL;
    END IF;
    n := webhook._der_uint(substr(der, n_el[2], n_el[3]));
    e := webhook._der_uint(substr(der, e_el[2], e_el[3]));
    IF n IS NULL OR e IS NULL OR n >= 2 ^ 4096::numeric OR e < 2 OR e > 8589934591 THEN
        RETURN NULL;
    END IF;
    -- n's length in bytes: its DER content, less the zero a high bit needs.
    RETURN ARRAY[n, e, n_el[3] - CASE WHEN get_byte(der, n_el[2] - 1) = 0 THEN 1 ELSE 0 END];
END
$$;

-- The DER inside -----BEGIN <label>----- armour, or bare base64 (the
-- standard alphabet, padded): NULL for anything else, or nothing.
CREATE FUNCTION webhook._pem_or_base64(text text, label text) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    inner_ text := btrim(text, E' \t\n\r\f');
    compact text;
BEGIN
    IF starts_with(inner_, '-----BEGIN ' || label || '-----') THEN
        inner_ := substr(inner_, length('-----BEGIN ' || label || '-----') + 1);
        IF strpos(inner_, '-----END ' || label || '-----') = 0 THEN
            RETURN NULL;
        END IF;
        inner_ := split_part(inner_, '-----END ' || label || '-----', 1);
    END IF;
    compact := regexp_replace(inner_, E'[ \t\n\r\f]+', '', 'g');
    IF compact = '' OR length(compact) % 4 <> 0 OR compact !~ '^[A-Za-z0-9+/]*={0,2}$' THEN
        RETURN NULL;
    END IF;
    RETURN webhook._base64_any(compact);
END
$$;

REVOKE ALL ON FUNCTION webhook._int(bytea), webhook._bytes(numeric, integer), webhook._reversed(bytea),
    webhook._bits(numeric, integer), webhook._modpow(numeric, numeric, numeric), webhook._modinv(numeric, numeric),
    webhook._ed25519_point(bytea), webhook._ed25519_small_order(numeric[]), webhook._ed25519_verify(bytea, bytea, bytea, numeric[]),
    webhook._p256_der(bytea), webhook._p256_key(bytea), webhook._p256_verify(numeric[], bytea, bytea),
    webhook._rsa_verify(numeric[], bytea, bytea), webhook._der_at(bytea, integer), webhook._der_uint(bytea),
    webhook._rsa_certificate_key(bytea), webhook._pem_or_base64(text, text)
    FROM PUBLIC;

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
