//! Bounds on a JSON Schema document, checked before it is compiled: a schema comes from a
//! package, a temporary upload or a tool definition posted to `tools:validate`, and one whose
//! `allOf` fans out over a chain of `$ref`s makes every validation walk 2ⁿ subschemas.
//!
//! The walk counts the subschemas one value's check may visit: a subschema is counted once per
//! way it is reached (through `allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`,
//! `properties`, `items`, …, and local `$ref`s, followed), with the count of each subschema
//! remembered, so the walk itself stays linear in the document. A `$ref` back into a subschema
//! being counted (a recursive schema, a tree) counts once: how deep it goes is the instance's
//! depth, which the request size bounds. A chain of `$ref`s is followed [`MAX_REF_CHAIN`]
//! deep at most.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// The most bytes of a schema document (as compact JSON).
pub const MAX_BYTES: usize = 1 << 20;
/// The deepest nesting of a schema document.
pub const MAX_DEPTH: usize = 64;
/// The most subschemas the check of one value may visit.
pub const MAX_CHECKS: u64 = 100_000;
/// The longest chain of `$ref`s followed one after the other.
pub const MAX_REF_CHAIN: usize = 32;

/// Keywords whose value is one subschema.
const ONE: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "items",
    "additionalItems",
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
];
/// Keywords whose value is a list of subschemas.
const LIST: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// Keywords whose value maps names to subschemas.
const MAP: &[&str] = &["properties", "patternProperties", "dependentSchemas"];

/// Whether `schema` stays within the bounds; else which one it passes, and how to fix it.
pub fn check(schema: &Value) -> Result<(), String> {
    let bytes = serde_json::to_vec(schema).map_or(usize::MAX, |b| b.len());
    if bytes > MAX_BYTES {
        return Err(format!(
            "the schema is {bytes} bytes; at most {MAX_BYTES} are accepted"
        ));
    }
    let depth = depth(schema);
    if depth > MAX_DEPTH {
        return Err(format!(
            "the schema nests {depth} levels deep; at most {MAX_DEPTH} are accepted"
        ));
    }
    let mut walk = Walk {
        root: schema,
        known: HashMap::new(),
        open: HashSet::new(),
        chain_too_long: false,
    };
    let checks = walk.cost(schema, String::new(), 0);
    if checks > MAX_CHECKS {
        return Err(format!(
            "checking one value against the schema would visit more than {MAX_CHECKS} \
             subschemas (allOf/anyOf/oneOf fanning out over $ref chains); simplify it"
        ));
    }
    if walk.chain_too_long {
        return Err(format!(
            "the schema chains more than {MAX_REF_CHAIN} $refs one after the other; at most \
             {MAX_REF_CHAIN} are accepted"
        ));
    }
    Ok(())
}

fn depth(value: &Value) -> usize {
    // Iterative: the document may be deeper than the stack allows.
    let mut deepest = 0;
    let mut next = vec![(value, 1usize)];
    while let Some((value, level)) = next.pop() {
        deepest = deepest.max(level);
        match value {
            Value::Array(items) => next.extend(items.iter().map(|v| (v, level + 1))),
            Value::Object(map) => next.extend(map.values().map(|v| (v, level + 1))),
            _ => {}
        }
    }
    deepest
}

struct Walk<'a> {
    root: &'a Value,
    /// The count of each subschema, by JSON pointer.
    known: HashMap<String, u64>,
    /// Subschemas being counted (a `$ref` back to one is a recursion).
    open: HashSet<String>,
    /// A `$ref` chain went past [`MAX_REF_CHAIN`] (and was not followed further).
    chain_too_long: bool,
}

impl<'a> Walk<'a> {
    /// The subschemas the check of one value against `node` (at `pointer`, reached through
    /// `refs` `$ref`s in a row) may visit.
    fn cost(&mut self, node: &'a Value, pointer: String, refs: usize) -> u64 {
        if let Some(&known) = self.known.get(&pointer) {
            return known;
        }
        let Value::Object(map) = node else {
            return 1;
        };
        if !self.open.insert(pointer.clone()) {
            return 1;
        }
        let mut total: u64 = 1;
        let mut add = |walk: &mut Self, child: &'a Value, at: String, refs: usize| {
            total = total.saturating_add(walk.cost(child, at, refs));
        };
        for key in ONE {
            if let Some(child) = map.get(*key).filter(|c| c.is_object()) {
                add(self, child, format!("{pointer}/{key}"), refs);
            }
        }
        for key in LIST {
            if let Some(Value::Array(children)) = map.get(*key) {
                for (i, child) in children.iter().enumerate() {
                    add(self, child, format!("{pointer}/{key}/{i}"), refs);
                }
            }
        }
        for key in MAP {
            if let Some(Value::Object(children)) = map.get(*key) {
                for (name, child) in children {
                    add(
                        self,
                        child,
                        format!("{pointer}/{key}/{}", escape(name)),
                        refs,
                    );
                }
            }
        }
        if let Some(target) = map.get("$ref").and_then(Value::as_str)
            && let Some(fragment) = target.strip_prefix('#')
            && let Some(child) = self.resolve(fragment)
        {
            if refs < MAX_REF_CHAIN {
                add(self, child, fragment.to_owned(), refs + 1);
            } else {
                self.chain_too_long = true;
            }
        }
        self.open.remove(&pointer);
        // Counted past the bound: the rest cannot bring it back.
        self.known.insert(pointer, total.min(MAX_CHECKS + 1));
        total
    }

    /// The subschema a local `$ref` fragment points at (`""` is the whole document).
    fn resolve(&self, fragment: &str) -> Option<&'a Value> {
        let pointer = percent_decode(fragment)?;
        self.root.pointer(&pointer)
    }
}

/// A property name as a JSON pointer token.
fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// A `$ref` fragment is URI-encoded (`%25` for `%`); JSON pointers are not.
fn percent_decode(fragment: &str) -> Option<String> {
    let bytes = fragment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    #[test]
    fn a_fan_out_over_a_ref_chain_is_refused_quickly() {
        // `allOf` doubling at each of 48 `$ref`s.
        let bomb: Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/schema_bomb.json")).unwrap();
        let started = std::time::Instant::now();
        let e = super::check(&bomb).unwrap_err();
        assert!(e.contains("more than 100000 subschemas"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        // The same chain cut short after a few doublings passes.
        let mut small = bomb.clone();
        small["$defs"]["d8"] = json!({"type": "string"});
        super::check(&small).unwrap();
    }

    #[test]
    fn recursive_schemas_depth_and_size() {
        // A tree: a recursion counts once.
        let tree = json!({"type": "object", "$defs": {"node": {"type": "object", "properties": {
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
            "properties": {"root": {"$ref": "#/$defs/node"}}});
        super::check(&tree).unwrap();
        let mut deep = json!({"type": "string"});
        for _ in 0..100 {
            deep = json!({"not": deep});
        }
        assert!(super::check(&deep).unwrap_err().contains("levels deep"));
        let big = json!({"description": "x".repeat(2 << 20)});
        assert!(super::check(&big).unwrap_err().contains("bytes"));
        // A chain of 10,000 `$ref`s, one to the next: refused, not walked to its end.
        let mut defs = serde_json::Map::new();
        for i in 0..10_000 {
            defs.insert(
                format!("d{i}"),
                json!({"$ref": format!("#/$defs/d{}", i + 1)}),
            );
        }
        let chain = json!({"$defs": defs, "$ref": "#/$defs/d0"});
        assert!(
            super::check(&chain)
                .unwrap_err()
                .contains("more than 32 $refs")
        );
    }
}
