import { describe, expect, it } from 'vitest';
import { formatErrorDetails } from './errors.js';
import { formatHoursToFull } from './output.js';

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
