import { describe, expect, it } from 'vitest';
import { HUMAN_TEXT_PATTERN, humanText } from './text.js';

describe('humanText', () => {
  // The document states the rules as a pattern; the API enforces the refinements. A value on
  // which they disagree is a request a fuzzer rightly expects taken and the API refuses, or the
  // reverse (issue 42: a NUL in an outcome reason was schema-valid and refused).
  const pattern = new RegExp(HUMAN_TEXT_PATTERN, 'u');
  const schema = humanText(1, 64);
  const samples: Record<string, string> = {
    ascii: 'a name',
    nul: 'a\u0000b',
    'only nul': '\u0000',
    'only spaces': '   ',
    'only tab and newline': '\t\n',
    'nbsp and ideographic space': '\u00a0\u3000',
    'byte order mark': '\ufeff',
    'line separators': '\u2028\u2029',
    'information separators (white space in Python, not in trim)': '\u001c\u001f',
    'next line (white space in Python, not in trim)': '\u0085',
    'mongolian vowel separator (no longer white space)': '\u180e',
    'spaces around a letter': '  x  ',
    'astral character': '\u{1F916}',
    'astral after spaces': ' \u{20000}',
    'accented letters': 'Évaluation réussie',
  };

  for (const [name, value] of Object.entries(samples)) {
    it(`agrees with its documented pattern on ${name}`, () => {
      expect(schema.safeParse(value).success).toBe(pattern.test(value));
    });
  }

  it('refuses a lone surrogate, the one rule the pattern leaves out (no portable regex names one)', () => {
    for (const value of ['a\ud800', '\udc00b', '\udc00\ud800']) expect(schema.safeParse(value).success).toBe(false);
  });

  it('refuses what the pattern refuses, with the refinement messages', () => {
    expect(schema.safeParse('a\u0000').error?.issues[0]?.message).toBe('must not contain NUL');
    expect(schema.safeParse('\u3000').error?.issues[0]?.message).toBe('must not be only white space');
  });
});
