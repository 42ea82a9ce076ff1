/**
 * The two engines' schemas, read back from the databases after every migration ran, must say the
 * same thing: the same tables, the same columns with the same type family, nullability and
 * default-ness, the same primary keys, foreign keys, unique constraints, indexes (by their
 * columns, uniqueness and partial-ness; names differ by engine) and CHECKs (column and values). The
 * tables are declared once (shared/schema.ts), but each engine renders them in its own dialect and
 * adds its own statements: this is what notices when a rendering or an engine's own step moves one
 * schema away from the other.
 */
import { describe, expect, it } from 'vitest';
import type { PgStore } from './postgres/store.js';
import type { SqliteStore } from './sqlite/store.js';
import { openTestStore, postgresAvailable } from './test-store.js';

/** A schema in engine-neutral words, each part a sorted list of strings (easy to diff). */
export interface SchemaShape {
  tables: string[];
  columns: string[];
  primaryKeys: string[];
  foreignKeys: string[];
  indexes: string[];
  /** `table.column check {values}`: the CHECKs, each a column and the values it allows. */
  checks: string[];
}

/** A CHECK's body (`state IN ('a', 'b')`, `id = 1`, PostgreSQL's `(state = ANY (ARRAY['a'::text]))`) in neutral words. */
export function checkShape(table: string, body: string): string {
  const column = /^[\s(]*"?([a-z_]+)"?/.exec(body)?.[1] ?? '?';
  const quoted = [...body.matchAll(/'([^']*)'/g)].map((m) => m[1]!);
  const values = quoted.length > 0 ? quoted : [...body.matchAll(/=\s*\(?(-?\d+)/g)].map((m) => m[1]!);
  return `${table}.${column} check {${values.sort().join(', ')}}`;
}

/** The bodies of the CHECK (...) clauses in a CREATE TABLE statement. */
function sqliteChecks(sql: string): string[] {
  const out: string[] = [];
  const re = /CHECK\s*\(/gi;
  for (let m = re.exec(sql); m; m = re.exec(sql)) {
    let depth = 1;
    let i = re.lastIndex;
    for (; i < sql.length && depth > 0; i++) depth += sql[i] === '(' ? 1 : sql[i] === ')' ? -1 : 0;
    out.push(sql.slice(re.lastIndex, i - 1));
  }
  return out;
}

/** Tables of one engine's own bookkeeping, not the product's. */
const ENGINE_TABLES = new Set(['schema_migrations', 'sqlite_sequence', 'sqlite_stat1', 'sqlite_stat4']);

/**
 * Type families: what a value of the column can be, whatever the engine calls it. SQLite keeps
 * booleans as 0/1 INTEGER and JSON as TEXT; PostgreSQL's boolean and jsonb are the same families.
 */
export function typeFamily(declared: string): string {
  const t = declared.toLowerCase().trim();
  if (/^(integer|int|bigint|smallint|int2|int4|int8|boolean|bool)$/.test(t)) return 'integer';
  if (/^(text|character varying.*|character.*|varchar.*|char.*|jsonb|json|uuid)$/.test(t)) return 'text';
  if (/^(real|double precision|float8|float4|numeric.*)$/.test(t)) return 'real';
  if (/^(blob|bytea)$/.test(t)) return 'blob';
  return `unknown(${t})`;
}

function sorted(values: Iterable<string>): string[] {
  return [...values].sort();
}

export function sqliteShape(store: SqliteStore): SchemaShape {
  const db = store.db;
  const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").pluck().all() as string[]).filter((t) => !ENGINE_TABLES.has(t));
  const columns: string[] = [];
  const primaryKeys: string[] = [];
  const foreignKeys: string[] = [];
  const indexes: string[] = [];
  const checks: string[] = [];
  for (const table of tables) {
    const create = db.prepare("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?").pluck().get(table) as string;
    for (const body of sqliteChecks(create)) checks.push(checkShape(table, body));
    const info = db.prepare(`PRAGMA table_info("${table}")`).all() as { name: string; type: string; notnull: number; dflt_value: string | null; pk: number }[];
    const pk = info.filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk);
    for (const c of info) {
      // A single-column INTEGER PRIMARY KEY is the rowid: never null, whatever the declaration.
      const notNull = c.notnull === 1 || c.pk > 0;
      columns.push(`${table}.${c.name} ${typeFamily(c.type)}${notNull ? ' not null' : ''}${c.dflt_value !== null ? ' default' : ''}`);
    }
    if (pk.length > 0) primaryKeys.push(`${table}(${pk.map((c) => c.name).join(', ')})`);
    const fks = db.prepare(`PRAGMA foreign_key_list("${table}")`).all() as { id: number; seq: number; table: string; from: string; to: string | null; on_delete: string }[];
    const byId = new Map<number, typeof fks>();
    for (const fk of fks) byId.set(fk.id, [...(byId.get(fk.id) ?? []), fk]);
    for (const group of byId.values()) {
      group.sort((a, b) => a.seq - b.seq);
      const target = group[0]!.table;
      const to = group.map((f) => f.to ?? pkColumns(db, target)[f.seq]!);
      foreignKeys.push(`${table}(${group.map((f) => f.from).join(', ')}) -> ${target}(${to.join(', ')}) on delete ${group[0]!.on_delete.toLowerCase()}`);
    }
    const list = db.prepare(`PRAGMA index_list("${table}")`).all() as { name: string; unique: number; origin: string; partial: number }[];
    for (const ix of list) {
      if (ix.origin === 'pk') continue;
      const cols = (db.prepare(`PRAGMA index_xinfo("${ix.name}")`).all() as { cid: number; name: string | null; key: number }[])
        .filter((c) => c.key === 1)
        .map((c) => (c.cid === -2 ? '<expr>' : c.name!));
      indexes.push(`${table}(${cols.join(', ')})${ix.unique ? ' unique' : ''}${ix.partial ? ' partial' : ''}`);
    }
  }
  return { tables: sorted(tables), columns: sorted(columns), primaryKeys: sorted(primaryKeys), foreignKeys: sorted(foreignKeys), indexes: sorted(indexes), checks: sorted(checks) };
}

function pkColumns(db: SqliteStore['db'], table: string): string[] {
  return (db.prepare(`PRAGMA table_info("${table}")`).all() as { name: string; pk: number }[])
    .filter((c) => c.pk > 0)
    .sort((a, b) => a.pk - b.pk)
    .map((c) => c.name);
}

export async function postgresShape(store: PgStore): Promise<SchemaShape> {
  const db = store.db;
  const tables = (await db.many<{ name: string }>("SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")).map((r) => r.name).filter((t) => !ENGINE_TABLES.has(t));
  const cols = await db.many<{ table_name: string; column_name: string; data_type: string; is_nullable: string; column_default: string | null; is_identity: string }>(
    "SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity FROM information_schema.columns WHERE table_schema = 'public'",
  );
  const columns = cols
    .filter((c) => tables.includes(c.table_name))
    .map((c) => {
      // An identity or serial column is the rowid's counterpart: its default is the sequence.
      const generated = c.is_identity === 'YES' || (c.column_default ?? '').startsWith('nextval(');
      return `${c.table_name}.${c.column_name} ${typeFamily(c.data_type)}${c.is_nullable === 'NO' ? ' not null' : ''}${c.column_default !== null && !generated ? ' default' : ''}`;
    });
  const constraints = await db.many<{ table: string; type: string; cols: string[]; ftable: string | null; fcols: string[] | null; on_delete: string }>(
    `SELECT c.conrelid::regclass::text AS table, c.contype AS type,
            ARRAY(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, i) JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i)::text[] AS cols,
            c.confrelid::regclass::text AS ftable,
            ARRAY(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY k(n, i) JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.i)::text[] AS fcols,
            c.confdeltype AS on_delete
       FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
      WHERE n.nspname = 'public' AND c.contype IN ('p', 'f', 'u')`,
  );
  const onDelete: Record<string, string> = { a: 'no action', r: 'restrict', c: 'cascade', n: 'set null', d: 'set default' };
  const primaryKeys: string[] = [];
  const foreignKeys: string[] = [];
  const indexes: string[] = [];
  for (const c of constraints) {
    if (!tables.includes(c.table)) continue;
    if (c.type === 'p') primaryKeys.push(`${c.table}(${c.cols.join(', ')})`);
    else if (c.type === 'f') foreignKeys.push(`${c.table}(${c.cols.join(', ')}) -> ${c.ftable}(${(c.fcols ?? []).join(', ')}) on delete ${onDelete[c.on_delete] ?? c.on_delete}`);
  }
  // Every index but the primary keys', including those behind UNIQUE constraints (SQLite lists
  // those as indexes too).
  const ix = await db.many<{ table: string; cols: string[]; unique: boolean; partial: boolean }>(
    `SELECT t.relname AS table,
            ARRAY(SELECT CASE WHEN k.n = 0 THEN '<expr>' ELSE a.attname END
                    FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(n, o)
                    LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n
                   WHERE k.o <= i.indnkeyatts ORDER BY k.o)::text[] AS cols,
            i.indisunique AS unique, i.indpred IS NOT NULL AS partial
       FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace
      WHERE n.nspname = 'public' AND NOT i.indisprimary`,
  );
  for (const i of ix) {
    if (!tables.includes(i.table)) continue;
    indexes.push(`${i.table}(${i.cols.join(', ')})${i.unique ? ' unique' : ''}${i.partial ? ' partial' : ''}`);
  }
  const checkRows = await db.many<{ table: string; def: string }>(
    `SELECT c.conrelid::regclass::text AS table, pg_get_constraintdef(c.oid) AS def
       FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = 'public' AND c.contype = 'c'`,
  );
  const checks = checkRows.filter((c) => tables.includes(c.table)).map((c) => checkShape(c.table, c.def.replace(/^CHECK\s*/, '')));
  return { tables: sorted(tables), columns: sorted(columns), primaryKeys: sorted(primaryKeys), foreignKeys: sorted(foreignKeys), indexes: sorted(indexes), checks: sorted(checks) };
}

/** Differences by design, each with its reason; nothing else may differ. */
const INTENDED = {
  sqlite: new Set<string>([
    // A dataset's snapshot runs in chunks on SQLite (one writer: ingest must not wait for a whole
    // snapshot), so a claim with a lease marks it under way; PostgreSQL snapshots in one
    // transaction (MVCC: ingest goes on meanwhile).
    'datasets.snapshot_claim text',
    'datasets.snapshot_lease_until integer',
    // SQLite's index ends with the rowid (seq) by itself; PostgreSQL names it.
    'episodes(org_id, started_at)',
  ]),
  postgres: new Set<string>([
    // Rate windows shared by the replicas; SQLite is served by one process and counts in memory.
    'rate_counters',
    'rate_counters.count integer not null',
    'rate_counters.key text not null',
    'rate_counters.window_start integer not null',
    'rate_counters(key)',
    'episodes(org_id, started_at, seq)',
  ]),
};

const runs = postgresAvailable() && process.env.FLEET_TEST_DATABASE !== 'sqlite' ? describe : describe.skip;

runs('the schemas of the two engines', () => {
  it('have the same tables, columns (type family, null, default), keys, indexes and checks after every migration', async () => {
    const lite = await openTestStore('sqlite');
    const pgStore = await openTestStore('postgres');
    try {
      const a = sqliteShape(lite as SqliteStore);
      const b = await postgresShape(pgStore as PgStore);
      const drift: Record<string, { onlySqlite: string[]; onlyPostgres: string[] }> = {};
      for (const part of ['tables', 'columns', 'primaryKeys', 'foreignKeys', 'indexes', 'checks'] as const) {
        const onlySqlite = a[part].filter((x) => !b[part].includes(x) && !INTENDED.sqlite.has(x));
        const onlyPostgres = b[part].filter((x) => !a[part].includes(x) && !INTENDED.postgres.has(x));
        if (onlySqlite.length + onlyPostgres.length > 0) drift[part] = { onlySqlite, onlyPostgres };
      }
      expect(drift).toEqual({});
      // The reading itself works: every CHECK both engines declare is seen (ten today).
      expect(a.checks.length).toBeGreaterThanOrEqual(10);
      expect(a.checks).toContain("replicas.state check {granted, synced, syncing, verified}");
      // Each intended difference still exists (else it goes from the list).
      for (const x of INTENDED.sqlite) expect(Object.values(a).flat()).toContain(x);
      for (const x of INTENDED.postgres) expect(Object.values(b).flat()).toContain(x);
    } finally {
      await lite.close();
      await pgStore.close();
    }
  });
});
