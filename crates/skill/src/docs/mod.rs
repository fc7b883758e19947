//! Skills as documents: `SKILL.md` files read and judged ([`document`]), and found across the
//! configured roots with their precedence ([`index`]), for the progressive disclosure of
//! `/v1/skill-docs` (level 1 the catalog, level 2 a skill's body, level 3 its files).

pub mod document;
pub mod index;
