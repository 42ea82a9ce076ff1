import { describe, expect, it } from 'vitest';
import { formatErrorDetails } from './errors.js';
import stringWidth from 'string-width';
import { formatHoursToFull, formatRecord, formatTable, padToWidth } from './output.js';

describe('time to a full disk', () => {
  it.each([
    [null, 'not filling'],
    [0.2, '12 min'],
    [0.001, '1 min'],
    [5.25, '5.3 h'],
    [48, '48.0 h'],
    [49, '2 days'],
    [24 * 300, '300 days'],
    [24 * 366, '> 1 year'],
    [35_535_165, '> 1 year'],
    [Infinity, '> 1 year'],
  ] as const)('%s hours reads %j', (hours, text) => {
    expect(formatHoursToFull(hours)).toBe(text);
  });
});

describe('API error details', () => {
  it('print one line per validation issue: where, why, the code, and unknown keys', () => {
    expect(
      formatErrorDetails({
        issues: [
          { location: 'querystring', path: '/from', code: 'invalid_format', message: 'Invalid ISO datetime' },
          { location: 'body', path: '/filter', code: 'unrecognized_keys', message: '2 unknown keys', keys: ['colour', 'size'] },
          { location: 'body', path: '', code: 'required', message: 'the body is empty' },
        ],
      }),
    ).toEqual(['querystring /from: Invalid ISO datetime (invalid_format)', 'body /filter: 2 unknown keys: colour, size (unrecognized_keys)', 'body: the body is empty (required)']);
  });

  it('print other details as key: value, control characters made printable, long values and many lines cut', () => {
    expect(formatErrorDetails({ limit: 'requests_per_minute_per_key', max: 600, retry_after_s: 12 })).toEqual(['limit: requests_per_minute_per_key', 'max: 600', 'retry_after_s: 12']);
    expect(formatErrorDetails({ robot_error: 'invalid_state\u001b[31m\n', cmd_id: 'cmd_1' })).toEqual(['robot_error: invalid_state?[31m?', 'cmd_id: cmd_1']);
    expect(formatErrorDetails({ note: 'x'.repeat(1000) })[0]).toHaveLength(300);
    const many = formatErrorDetails({ issues: Array.from({ length: 25 }, (_, i) => ({ location: 'body', path: `/${i}`, code: 'c', message: 'm' })) });
    expect(many).toHaveLength(21);
    expect(many[20]).toBe('… 5 more');
    expect(formatErrorDetails(undefined)).toEqual([]);
  });
});

describe('tables', () => {
  const columns = [
    { header: 'name', value: (r: { name: string; state: string }) => r.name },
    { header: 'state', value: (r: { name: string; state: string }) => r.state },
  ];
  // Where the second column starts, in terminal columns.
  const stateColumn = (line: string) => stringWidth(line.slice(0, line.lastIndexOf(' ') + 1));

  it('align wide (CJK) and combining characters by the columns they take, not their UTF-16 length', () => {
    const rows = [
      { name: 'plain', state: 'online' },
      { name: '机器人一号', state: 'online' }, // 5 characters, 10 columns
      { name: 'Zoe\u0301 cafe\u0301', state: 'offline' }, // 10 code units, 8 columns
    ];
    const lines = formatTable(rows, columns).trimEnd().split('\n');
    expect(lines).toEqual(['NAME        STATE', 'plain       online', '机器人一号  online', 'Zoe\u0301 cafe\u0301    offline']);
    expect(new Set(lines.map(stateColumn))).toEqual(new Set([12]));
  });

  it('cut a long cell at the column bound, never inside a character', () => {
    const [, cut] = formatTable([{ name: '机'.repeat(40), state: 'x' }], columns, 9).split('\n');
    expect(cut).toBe(`${'机'.repeat(4)}…  x`);
    const [, ascii] = formatTable([{ name: 'abcdefghijkl', state: 'x' }], columns, 9).split('\n');
    expect(ascii).toBe('abcdefgh…  x');
  });

  it('pad records and single values by width', () => {
    expect(formatRecord({ id: 'rbt_1', 名前: 'r' })).toBe('id    rbt_1\n名前  r\n');
    expect(padToWidth('e\u0301', 3)).toBe('e\u0301  ');
    expect(padToWidth('longer', 3)).toBe('longer');
  });
});
