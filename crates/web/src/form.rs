//! The run form of a skill, generated from its input and parameter schemas, and the reading of a
//! submitted form back into the JSON a create request carries. The console and the example
//! client both show it (`templates/partials/run_fields.html`) and read it back here.
//!
//! Supported property types: `string`, `number`, `integer`, `boolean`, `enum` (any JSON values),
//! and arrays of those (one item per line). Inputs marked `x-input-source: file` are file
//! pickers. Anything else (objects, `oneOf`, arrays of objects, …) is a JSON text field with a
//! note saying so, so every skill can still be run from the form.

use std::io::Write as _;

use axum::extract::Multipart;
use serde_json::{Map, Value};

use crate::i18n::Lang;

/// A JSON Schema with the order its `properties` were written in (a parsed [`Value`] sorts them;
/// the form keeps the author's order).
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    pub value: Value,
    order: Vec<String>,
}

impl Schema {
    pub fn parse(text: &str) -> serde_json::Result<Self> {
        #[derive(serde::Deserialize)]
        struct Order {
            #[serde(default)]
            properties: indexmap::IndexMap<String, serde::de::IgnoredAny>,
        }
        let value: Value = serde_json::from_str(text)?;
        let order = serde_json::from_str::<Order>(text)
            .map(|o| o.properties.into_keys().collect())
            .unwrap_or_default();
        Ok(Self { value, order })
    }

    /// The properties in the order written.
    pub fn properties(&self) -> impl Iterator<Item = (&String, &Value)> {
        let properties = self.value.get("properties").and_then(Value::as_object);
        self.order
            .iter()
            .filter_map(move |key| properties.and_then(|p| p.get_key_value(key)))
    }
}

/// Which part of a create request a field fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// `input`, typed inline.
    Input,
    /// An input the skill reads from an uploaded file (`x-input-source: file`).
    File,
    Parameter,
}

impl Section {
    pub fn prefix(self) -> &'static str {
        match self {
            Self::Input => "input",
            Self::File => "file",
            Self::Parameter => "parameter",
        }
    }
}

/// A scalar a field (or each item of a list field) holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Text,
    Number,
    Integer,
    Boolean,
    /// One of these values.
    Choice(Vec<Value>),
}

/// How a field is entered.
#[derive(Debug, Clone, PartialEq)]
pub enum Widget {
    One(Scalar),
    /// Several, one per line.
    List(Scalar),
    /// JSON text, for a schema the form cannot type; `note` says why.
    Json {
        note: String,
    },
    File,
    /// Free text over several lines (a standard skill's task).
    Prose,
    /// Any number of files, dropped or chosen, each under its own name.
    Files,
}

/// One field of the form.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub section: Section,
    pub key: String,
    pub title: String,
    pub description: Option<String>,
    pub required: bool,
    pub widget: Widget,
    pub default: Option<Value>,
    /// What the schema bounds the value by (each item's, for a list).
    pub bounds: Bounds,
}

/// The JSON Schema keywords a form field checks beside its type: `minimum`, `maximum`,
/// `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`, `minLength`, `maxLength`, `pattern`
/// (of a value or of each item of a list) and `minItems`, `maxItems` (of a list). They become
/// the control's attributes and are checked when the form comes back, so a bound is named on
/// its field rather than in the service's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bounds {
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub exclusive_minimum: Option<f64>,
    pub exclusive_maximum: Option<f64>,
    pub multiple_of: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub pattern: Option<String>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
}

impl Bounds {
    /// The bounds `property` states (for a list, its items' with its own item counts).
    fn of(property: &Value) -> Self {
        let value = match property.get("type").and_then(Value::as_str) {
            Some("array") => property.get("items").unwrap_or(&Value::Null),
            _ => property,
        };
        let number = |key: &str| value.get(key).and_then(Value::as_f64);
        let count = |from: &Value, key: &str| from.get(key).and_then(Value::as_u64);
        Self {
            minimum: number("minimum"),
            maximum: number("maximum"),
            exclusive_minimum: number("exclusiveMinimum"),
            exclusive_maximum: number("exclusiveMaximum"),
            multiple_of: number("multipleOf").filter(|m| *m > 0.0),
            min_length: count(value, "minLength"),
            max_length: count(value, "maxLength"),
            pattern: value
                .get("pattern")
                .and_then(Value::as_str)
                .map(str::to_owned),
            min_items: count(property, "minItems"),
            max_items: count(property, "maxItems"),
        }
    }

    /// What is wrong with one value (a list's item) by these bounds.
    fn check_one(&self, value: &Value) -> Result<(), Problem> {
        if let Some(n) = value.as_f64() {
            let shown = number_text(n);
            if let Some(min) = self.minimum.filter(|min| n < *min) {
                return Err(Problem::Below {
                    min: number_text(min),
                    given: shown,
                    exclusive: false,
                });
            }
            if let Some(min) = self.exclusive_minimum.filter(|min| n <= *min) {
                return Err(Problem::Below {
                    min: number_text(min),
                    given: shown,
                    exclusive: true,
                });
            }
            if let Some(max) = self.maximum.filter(|max| n > *max) {
                return Err(Problem::Above {
                    max: number_text(max),
                    given: shown,
                    exclusive: false,
                });
            }
            if let Some(max) = self.exclusive_maximum.filter(|max| n >= *max) {
                return Err(Problem::Above {
                    max: number_text(max),
                    given: shown,
                    exclusive: true,
                });
            }
            if let Some(step) = self.multiple_of {
                let ratio = n / step;
                if (ratio - ratio.round()).abs() > 1e-9 {
                    return Err(Problem::NotMultipleOf(number_text(step)));
                }
            }
        }
        if let Some(text) = value.as_str() {
            let chars = text.chars().count() as u64;
            if let Some(min) = self.min_length.filter(|min| chars < *min) {
                return Err(Problem::TooShort(min));
            }
            if let Some(max) = self.max_length.filter(|max| chars > *max) {
                return Err(Problem::TooLong(max));
            }
            // A pattern the form cannot compile is left to the service's own check.
            if let Some(pattern) = &self.pattern
                && regex::Regex::new(pattern).is_ok_and(|re| !re.is_match(text))
            {
                return Err(Problem::NotMatching(pattern.clone()));
            }
        }
        Ok(())
    }

    /// What is wrong with a field's value by these bounds.
    fn check(&self, value: &Value) -> Result<(), Problem> {
        let Value::Array(items) = value else {
            return self.check_one(value);
        };
        let count = items.len() as u64;
        if let Some(min) = self.min_items.filter(|min| count < *min) {
            return Err(Problem::TooFewItems(min));
        }
        if let Some(max) = self.max_items.filter(|max| count > *max) {
            return Err(Problem::TooManyItems(max));
        }
        for (n, item) in items.iter().enumerate() {
            self.check_one(item)
                .map_err(|problem| Problem::Line(n + 1, Box::new(problem)))?;
        }
        Ok(())
    }

    /// The `min` attribute of a number control.
    pub fn min_attr(&self) -> Option<String> {
        self.minimum.map(number_text)
    }

    /// The `max` attribute of a number control.
    pub fn max_attr(&self) -> Option<String> {
        self.maximum.map(number_text)
    }
}

/// A bound as written: `10`, not `10.0`.
fn number_text(n: f64) -> String {
    serde_json::Number::from_f64(n).map_or_else(
        || n.to_string(),
        |n| match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
            _ => n.to_string(),
        },
    )
}

impl Field {
    /// The form control's name: `input.<key>`, `file.<key>` or `parameter.<key>`.
    pub fn name(&self) -> String {
        format!("{}.{}", self.section.prefix(), self.key)
    }

    /// The default as the control shows it.
    pub fn default_text(&self) -> String {
        match (&self.default, &self.widget) {
            (None, _) => String::new(),
            (Some(Value::Array(items)), Widget::List(_)) => {
                items.iter().map(plain).collect::<Vec<_>>().join("\n")
            }
            (Some(value), Widget::Json { .. }) => value.to_string(),
            (Some(value), _) => plain(value),
        }
    }
}

/// A value as typed: strings without quotes, the rest as JSON.
fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The form of a standard Agent Skills skill: the task as free text (`input.prompt`) and the
/// files that go with it (`file.files`, each under its own name; their names become
/// `input.files`).
pub fn task_fields(prompt: &str, files: &str) -> Vec<Field> {
    vec![
        Field {
            section: Section::Input,
            key: "prompt".into(),
            title: "prompt".into(),
            description: Some(prompt.into()),
            required: true,
            widget: Widget::Prose,
            default: None,
            bounds: Bounds::default(),
        },
        Field {
            section: Section::File,
            key: "files".into(),
            title: "files".into(),
            description: Some(files.into()),
            required: false,
            widget: Widget::Files,
            default: None,
            bounds: Bounds::default(),
        },
    ]
}

/// [`check`], the files of a [`Widget::Files`] control first named: each goes under its own
/// name (see [`named_files`]), and those names are that input's value. The files to upload
/// come back with the form's input, parameter and engine.
pub fn check_files(
    fields: &[Field],
    values: &[(String, String)],
    files: Vec<Chosen>,
    engines: &[String],
) -> Result<(Submitted, String, Vec<Chosen>), Vec<FieldError>> {
    let Some(many) = fields.iter().find(|f| f.widget == Widget::Files) else {
        let (submitted, engine) = check(fields, values, &files, engines)?;
        return Ok((submitted, engine, files));
    };
    let (chosen, others): (Vec<Chosen>, Vec<Chosen>) =
        files.into_iter().partition(|f| f.key == many.key);
    let (mut files, names) = named_files(chosen);
    files.extend(others);
    let (mut submitted, engine) = check(fields, values, &files, engines)?;
    if !names.is_empty() {
        submitted.input.insert(many.key.clone(), names.into());
    }
    Ok((submitted, engine, files))
}

/// The chosen files of a [`Widget::Files`] control, each keyed by its own name (its last
/// path part; a name given twice gets a `2-`, `3-`… prefix), and those names in order.
fn named_files(files: Vec<Chosen>) -> (Vec<Chosen>, Vec<String>) {
    let mut names: Vec<String> = Vec::new();
    let named = files
        .into_iter()
        .filter_map(|mut file| {
            let base = file
                .name
                .rsplit(['/', '\\'])
                .next()
                .filter(|n| !n.is_empty() && *n != "." && *n != "..")?
                .to_owned();
            let name = (1..)
                .map(|n| {
                    if n == 1 {
                        base.clone()
                    } else {
                        format!("{n}-{base}")
                    }
                })
                .find(|candidate| !names.contains(candidate))
                .expect("a free name");
            names.push(name.clone());
            file.key = name;
            Some(file)
        })
        .collect();
    (named, names)
}

/// The fields of a skill's form: inputs (inline and files) first, then parameters, each in the
/// schema's property order.
pub fn fields(input: Option<&Schema>, parameter: Option<&Schema>) -> Vec<Field> {
    let mut fields = Vec::new();
    for (schema, inputs) in [(input, true), (parameter, false)] {
        let Some(schema) = schema else { continue };
        let required: Vec<&str> = schema
            .value
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for (key, property) in schema.properties() {
            let file = inputs && property.get("x-input-source") == Some(&Value::from("file"));
            let section = match (inputs, file) {
                (true, true) => Section::File,
                (true, false) => Section::Input,
                _ => Section::Parameter,
            };
            fields.push(Field {
                section,
                key: key.clone(),
                title: property
                    .get("title")
                    .and_then(Value::as_str)
                    .unwrap_or(key)
                    .to_owned(),
                description: property
                    .get("description")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                required: required.contains(&key.as_str()),
                widget: if file { Widget::File } else { widget(property) },
                default: property.get("default").cloned(),
                bounds: Bounds::of(property),
            });
        }
    }
    fields
}

fn widget(property: &Value) -> Widget {
    if let Some(scalar) = scalar(property) {
        return Widget::One(scalar);
    }
    if property.get("type") == Some(&Value::from("array"))
        && let Some(scalar) = property.get("items").and_then(scalar)
    {
        return Widget::List(scalar);
    }
    let shape = match property.get("type") {
        Some(Value::String(kind)) => format!("type `{kind}`"),
        Some(other) => format!("type {other}"),
        None => "this schema".to_owned(),
    };
    Widget::Json {
        note: format!("The form cannot type {shape}: enter it as JSON."),
    }
}

fn scalar(property: &Value) -> Option<Scalar> {
    if let Some(options) = property.get("enum").and_then(Value::as_array) {
        return Some(Scalar::Choice(options.clone()));
    }
    match property.get("type").and_then(Value::as_str)? {
        "string" => Some(Scalar::Text),
        "number" => Some(Scalar::Number),
        "integer" => Some(Scalar::Integer),
        "boolean" => Some(Scalar::Boolean),
        _ => None,
    }
}

/// A field the submitted form got wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The control's name (`input.<key>`, …).
    pub name: String,
    pub problem: Problem,
}

/// What is wrong with a field's value, said in either language ([`Problem::text`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    Required,
    NotNumber(String),
    NotInteger(String),
    NotBoolean(String),
    /// Not one of the `allowed` values; `given` is `None` when nothing was chosen.
    NotOneOf {
        allowed: Vec<String>,
        given: Option<String>,
    },
    /// Not valid JSON, with the parser's reason.
    NotJson(String),
    /// Under `minimum` (`exclusive`: at or under `exclusiveMinimum`).
    Below {
        min: String,
        given: String,
        exclusive: bool,
    },
    /// Over `maximum` (`exclusive`: at or over `exclusiveMaximum`).
    Above {
        max: String,
        given: String,
        exclusive: bool,
    },
    NotMultipleOf(String),
    /// Fewer characters than `minLength`.
    TooShort(u64),
    /// More characters than `maxLength`.
    TooLong(u64),
    /// Does not match `pattern`.
    NotMatching(String),
    TooFewItems(u64),
    TooManyItems(u64),
    /// Line `n` (from 1) of a list field.
    Line(usize, Box<Problem>),
}

impl Problem {
    /// The problem as a page in language `l` says it after the field's name.
    pub fn text(&self, l: Lang) -> String {
        let zh = l == Lang::Zh;
        match self {
            Problem::Required if zh => "为必填项".into(),
            Problem::Required => "is required".into(),
            Problem::NotNumber(v) if zh => format!("必须是数字，而不是 '{v}'"),
            Problem::NotNumber(v) => format!("must be a number, not '{v}'"),
            Problem::NotInteger(v) if zh => format!("必须是整数，而不是 '{v}'"),
            Problem::NotInteger(v) => format!("must be an integer, not '{v}'"),
            Problem::NotBoolean(v) if zh => format!("必须是 true 或 false，而不是 '{v}'"),
            Problem::NotBoolean(v) => format!("must be true or false, not '{v}'"),
            Problem::NotOneOf { allowed, given } => {
                let allowed = allowed.join(", ");
                match (given, zh) {
                    (Some(v), true) => format!("必须是 {allowed} 之一，而不是 '{v}'"),
                    (Some(v), false) => format!("must be one of {allowed}, not '{v}'"),
                    (None, true) => format!("必须是 {allowed} 之一"),
                    (None, false) => format!("must be one of {allowed}"),
                }
            }
            Problem::NotJson(reason) if zh => format!("不是有效的 JSON（{reason}）"),
            Problem::NotJson(reason) => format!("is not valid JSON ({reason})"),
            Problem::Below {
                min,
                given,
                exclusive: false,
            } if zh => {
                format!("不能小于 {min}（填的是 {given}）")
            }
            Problem::Below {
                min,
                given,
                exclusive: false,
            } => {
                format!("must be at least {min}, not {given}")
            }
            Problem::Below { min, given, .. } if zh => format!("必须大于 {min}（填的是 {given}）"),
            Problem::Below { min, given, .. } => format!("must be more than {min}, not {given}"),
            Problem::Above {
                max,
                given,
                exclusive: false,
            } if zh => {
                format!("不能大于 {max}（填的是 {given}）")
            }
            Problem::Above {
                max,
                given,
                exclusive: false,
            } => {
                format!("must be at most {max}, not {given}")
            }
            Problem::Above { max, given, .. } if zh => format!("必须小于 {max}（填的是 {given}）"),
            Problem::Above { max, given, .. } => format!("must be less than {max}, not {given}"),
            Problem::NotMultipleOf(step) if zh => format!("必须是 {step} 的倍数"),
            Problem::NotMultipleOf(step) => format!("must be a multiple of {step}"),
            Problem::TooShort(n) if zh => format!("至少要 {n} 个字符"),
            Problem::TooShort(n) => format!("must be at least {n} characters long"),
            Problem::TooLong(n) if zh => format!("最多 {n} 个字符"),
            Problem::TooLong(n) => format!("must be at most {n} characters long"),
            Problem::NotMatching(p) if zh => format!("必须符合模式 {p}"),
            Problem::NotMatching(p) => format!("must match the pattern {p}"),
            Problem::TooFewItems(n) if zh => format!("至少要 {n} 项"),
            Problem::TooFewItems(n) => format!("must have at least {n} items"),
            Problem::TooManyItems(n) if zh => format!("最多 {n} 项"),
            Problem::TooManyItems(n) => format!("must have at most {n} items"),
            Problem::Line(n, problem) if zh => format!("第 {n} 行：{}", problem.text(l)),
            Problem::Line(n, problem) => format!("line {n}: {}", problem.text(l)),
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text(Lang::En))
    }
}

/// What a submitted form fills of a create request.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    pub input: Map<String, Value>,
    pub parameter: Map<String, Value>,
}

/// The `input` and `parameter` objects of a submitted form (`values` by control name; file
/// fields are checked elsewhere, by the upload), or every field it got wrong.
pub fn read(fields: &[Field], values: &[(String, String)]) -> Result<Submitted, Vec<FieldError>> {
    let (mut input, mut parameter, mut errors) = (Map::new(), Map::new(), Vec::new());
    for field in fields.iter().filter(|f| f.section != Section::File) {
        let name = field.name();
        let text = values
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("", |(_, v)| v.as_str());
        let value = match &field.widget {
            Widget::One(scalar) if !text.trim().is_empty() => one(scalar, text).map(Some),
            Widget::Prose if !text.trim().is_empty() => Ok(Some(Value::from(text))),
            Widget::List(scalar) => list(scalar, text),
            Widget::Json { .. } if !text.trim().is_empty() => serde_json::from_str(text)
                .map(Some)
                .map_err(|e| Problem::NotJson(e.to_string())),
            _ => Ok(None),
        };
        let target = match field.section {
            Section::Parameter => &mut parameter,
            _ => &mut input,
        };
        match value.and_then(|v| match &v {
            Some(value) => field.bounds.check(value).map(|()| v),
            None => Ok(v),
        }) {
            Ok(Some(value)) => {
                target.insert(field.key.clone(), value);
            }
            Ok(None) if field.required => errors.push(FieldError {
                name,
                problem: Problem::Required,
            }),
            Ok(None) => {}
            Err(problem) => errors.push(FieldError { name, problem }),
        }
    }
    if errors.is_empty() {
        Ok(Submitted { input, parameter })
    } else {
        Err(errors)
    }
}

fn one(scalar: &Scalar, text: &str) -> Result<Value, Problem> {
    let trimmed = text.trim();
    match scalar {
        Scalar::Text => Ok(Value::from(text)),
        Scalar::Number => trimmed
            .parse::<f64>()
            .ok()
            .and_then(|n| serde_json::Number::from_f64(n).map(Value::Number))
            .ok_or_else(|| Problem::NotNumber(trimmed.into())),
        Scalar::Integer => trimmed
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| Problem::NotInteger(trimmed.into())),
        Scalar::Boolean => match trimmed {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(Problem::NotBoolean(trimmed.into())),
        },
        Scalar::Choice(options) => options
            .iter()
            .find(|o| plain(o) == trimmed)
            .cloned()
            .ok_or_else(|| Problem::NotOneOf {
                allowed: options.iter().map(plain).collect(),
                given: Some(trimmed.into()),
            }),
    }
}

/// One item per non-empty line; no lines is no value.
fn list(scalar: &Scalar, text: &str) -> Result<Option<Value>, Problem> {
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let item = one(scalar, line).map_err(|problem| Problem::Line(n + 1, Box::new(problem)))?;
        items.push(item);
    }
    Ok((!items.is_empty()).then_some(Value::Array(items)))
}

/// A form as a page shows it: its fields, the values to show again (a submission with mistakes,
/// or the run being repeated with changes) and what each field got wrong.
#[derive(Debug, Clone, Default)]
pub struct FormView {
    pub fields: Vec<Field>,
    /// Values by control name; a field without one shows its default.
    pub values: Vec<(String, String)>,
    pub errors: Vec<FieldError>,
    /// The language problems are said in.
    pub lang: Lang,
}

impl FormView {
    pub fn new(fields: Vec<Field>) -> Self {
        Self {
            fields,
            ..Self::default()
        }
    }

    /// The value of a control by name (`engine`, `model`, …), if the page has one.
    pub fn named(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// What the field's control shows.
    pub fn value(&self, field: &Field) -> String {
        self.named(&field.name())
            .map_or_else(|| field.default_text(), str::to_owned)
    }

    /// What the field got wrong, in the page's language.
    pub fn error(&self, field: &Field) -> Option<String> {
        self.error_of(&field.name())
    }

    /// The problem with a control by name (also one that is not a schema field: `engine`).
    pub fn error_of(&self, name: &str) -> Option<String> {
        self.errors
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.problem.text(self.lang))
    }

    /// A problem of the list at the top of the form, in the page's language.
    pub fn problem(&self, error: &FieldError) -> String {
        error.problem.text(self.lang)
    }

    pub fn selected(&self, field: &Field, value: &str) -> bool {
        self.value(field) == value
    }

    pub fn is_list(&self, field: &Field) -> bool {
        matches!(field.widget, Widget::List(_))
    }

    /// The `<input type=...>` of a one-value field, `None` for a select or a text area.
    pub fn input_type(&self, field: &Field) -> Option<&'static str> {
        match field.widget {
            Widget::One(Scalar::Text) => Some("text"),
            Widget::One(Scalar::Number | Scalar::Integer) => Some("number"),
            Widget::File | Widget::Files => Some("file"),
            _ => None,
        }
    }

    /// Whether a file control takes several files.
    pub fn is_multiple(&self, field: &Field) -> bool {
        field.widget == Widget::Files
    }

    /// The `step` of a number input.
    pub fn step(&self, field: &Field) -> Option<&'static str> {
        match field.widget {
            Widget::One(Scalar::Integer) => Some("1"),
            Widget::One(Scalar::Number) => Some("any"),
            _ => None,
        }
    }

    pub fn is_file(&self, field: &Field) -> bool {
        matches!(field.widget, Widget::File | Widget::Files)
    }

    /// The choices of a select: `(value, label)`; booleans and optional choices start unset.
    pub fn choices(&self, field: &Field) -> Option<Vec<(String, String)>> {
        let options: Vec<String> = match &field.widget {
            Widget::One(Scalar::Boolean) => vec!["true".into(), "false".into()],
            Widget::One(Scalar::Choice(values)) => values.iter().map(plain).collect(),
            _ => return None,
        };
        let mut choices = vec![(String::new(), "—".to_owned())];
        choices.extend(options.into_iter().map(|o| (o.clone(), o)));
        Some(choices)
    }

    /// The JSON field's reason, for a schema the form cannot type.
    pub fn json_note<'a>(&self, field: &'a Field) -> Option<&'a str> {
        match &field.widget {
            Widget::Json { note } => Some(note),
            _ => None,
        }
    }
}

/// The values a form shows to repeat a request: its `input` and `parameter` as the fields'
/// controls would have sent them (file fields stay empty: files are chosen again).
pub fn values_of(fields: &[Field], input: &Value, parameter: &Value) -> Vec<(String, String)> {
    fields
        .iter()
        .filter_map(|field| {
            let source = match field.section {
                Section::Input => input,
                Section::Parameter => parameter,
                Section::File => return None,
            };
            let value = source.get(&field.key)?;
            let text = match (value, &field.widget) {
                (Value::Array(items), Widget::List(_)) => {
                    items.iter().map(plain).collect::<Vec<_>>().join("\n")
                }
                (value, Widget::Json { .. }) => value.to_string(),
                (value, _) => plain(value),
            };
            Some((field.name(), text))
        })
        .collect()
}

/// A file chosen in a form.
#[derive(Debug, Clone)]
pub struct Chosen {
    /// The input key (the control was `file.<key>`).
    pub key: String,
    /// The name the file had on the user's machine.
    pub name: String,
    pub bytes: Vec<u8>,
}

/// A submitted multipart form: its text values by control name and the files chosen (a file
/// control left empty sends nothing). The error says which part could not be read.
pub async fn receive(
    mut multipart: Multipart,
) -> Result<(Vec<(String, String)>, Vec<Chosen>), String> {
    let (mut values, mut files) = (Vec::new(), Vec::new());
    while let Some(part) = multipart
        .next_field()
        .await
        .map_err(|e| format!("the form could not be read: {e}"))?
    {
        let name = part.name().unwrap_or_default().to_owned();
        if let Some(key) = name.strip_prefix("file.") {
            let key = key.to_owned();
            let file_name = part.file_name().unwrap_or_default().to_owned();
            let bytes = part
                .bytes()
                .await
                .map_err(|e| format!("the file for {name} could not be read: {e}"))?;
            if !bytes.is_empty() {
                files.push(Chosen {
                    key,
                    name: file_name,
                    bytes: bytes.to_vec(),
                });
            }
        } else {
            let value = part
                .text()
                .await
                .map_err(|e| format!("the field {name} could not be read: {e}"))?;
            values.push((name, value));
        }
    }
    Ok((values, files))
}

/// A control's value by name, trimmed; `None` when absent or blank.
pub fn value(values: &[(String, String)], name: &str) -> Option<String> {
    values
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// A submitted run form checked whole: its `input` and `parameter` with the engine chosen
/// (one of `engines`), or every mistake at once — each field's, each required file not
/// chosen, an engine not offered.
pub fn check(
    fields: &[Field],
    values: &[(String, String)],
    files: &[Chosen],
    engines: &[String],
) -> Result<(Submitted, String), Vec<FieldError>> {
    let submitted = read(fields, values);
    let mut errors = submitted.as_ref().err().cloned().unwrap_or_default();
    errors.extend(missing_files(fields, files));
    let engine = value(values, "engine").filter(|e| engines.contains(e));
    if engine.is_none() {
        errors.push(FieldError {
            name: "engine".into(),
            problem: Problem::NotOneOf {
                allowed: engines.to_vec(),
                given: None,
            },
        });
    }
    match (submitted, engine) {
        (Ok(submitted), Some(engine)) if errors.is_empty() => Ok((submitted, engine)),
        _ => Err(errors),
    }
}

/// The required file fields no file was chosen for.
pub fn missing_files(fields: &[Field], files: &[Chosen]) -> Vec<FieldError> {
    fields
        .iter()
        .filter(|f| f.section == Section::File && f.required)
        .filter(|f| !files.iter().any(|c| c.key == f.key))
        .map(|f| FieldError {
            name: f.name(),
            problem: Problem::Required,
        })
        .collect()
}

/// A zip of the chosen files, each named by its input key (what an upload expects).
pub fn zip_files(files: &[Chosen]) -> zip::result::ZipResult<Vec<u8>> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for file in files {
        zip.start_file(file.key.as_str(), zip::write::SimpleFileOptions::default())?;
        zip.write_all(&file.bytes)?;
    }
    Ok(zip.finish()?.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every supported type and two unsupported ones, properties not in sorted order.
    fn every_type() -> (Schema, Schema) {
        let input = r#"{
            "type": "object",
            "required": ["topic", "paper"],
            "properties": {
                "topic": {"type": "string", "title": "Topic", "description": "What to write about"},
                "paper": {"type": "string", "x-input-source": "file", "description": "A PDF"},
                "tags": {"type": "array", "items": {"type": "string"}, "default": ["a", "b"]},
                "shape": {"type": "object", "properties": {"x": {"type": "integer"}}}
            }
        }"#;
        let parameter = r#"{
            "type": "object",
            "required": ["count"],
            "properties": {
                "count": {"type": "integer", "default": 3},
                "ratio": {"type": "number"},
                "strict": {"type": "boolean"},
                "style": {"enum": ["short", "long", 7]},
                "sizes": {"type": "array", "items": {"type": "integer"}},
                "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]}
            }
        }"#;
        (
            Schema::parse(input).unwrap(),
            Schema::parse(parameter).unwrap(),
        )
    }

    #[test]
    fn every_supported_type_gets_its_control_and_the_rest_a_json_field() {
        let (input, parameter) = every_type();
        let fields = fields(Some(&input), Some(&parameter));
        let shown: Vec<(String, bool, Widget)> = fields
            .iter()
            .map(|f| (f.name(), f.required, f.widget.clone()))
            .collect();
        let json_note = |shape: &str| Widget::Json {
            note: format!("The form cannot type {shape}: enter it as JSON."),
        };
        assert_eq!(
            shown,
            vec![
                ("input.topic".into(), true, Widget::One(Scalar::Text)),
                ("file.paper".into(), true, Widget::File),
                ("input.tags".into(), false, Widget::List(Scalar::Text)),
                ("input.shape".into(), false, json_note("type `object`")),
                ("parameter.count".into(), true, Widget::One(Scalar::Integer)),
                ("parameter.ratio".into(), false, Widget::One(Scalar::Number)),
                (
                    "parameter.strict".into(),
                    false,
                    Widget::One(Scalar::Boolean)
                ),
                (
                    "parameter.style".into(),
                    false,
                    Widget::One(Scalar::Choice(vec![
                        json!("short"),
                        json!("long"),
                        json!(7)
                    ]))
                ),
                (
                    "parameter.sizes".into(),
                    false,
                    Widget::List(Scalar::Integer)
                ),
                ("parameter.either".into(), false, json_note("this schema")),
            ]
        );
        assert_eq!(fields[0].title, "Topic");
        assert_eq!(
            fields[0].description.as_deref(),
            Some("What to write about")
        );
        assert_eq!(fields[2].default_text(), "a\nb");
        assert_eq!(fields[4].default_text(), "3");
    }

    #[test]
    fn a_submitted_form_reads_back_typed_or_names_each_wrong_field() {
        let (input, parameter) = every_type();
        let fields = fields(Some(&input), Some(&parameter));
        let form = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let Submitted { input, parameter } = read(
            &fields,
            &form(&[
                ("input.topic", "rust"),
                ("input.tags", "x\n\n y \n"),
                ("input.shape", r#"{"x": 1}"#),
                ("parameter.count", " 4 "),
                ("parameter.ratio", "0.5"),
                ("parameter.strict", "true"),
                ("parameter.style", "7"),
                ("parameter.sizes", "1\n2"),
                ("parameter.either", ""),
            ]),
        )
        .unwrap();
        assert_eq!(
            Value::Object(input.clone()),
            json!({"topic": "rust", "tags": ["x", " y "], "shape": {"x": 1}})
        );
        assert_eq!(
            Value::Object(parameter.clone()),
            json!({"count": 4, "ratio": 0.5, "strict": true, "style": 7, "sizes": [1, 2]})
        );
        // A request shown again in the form reads back as it was sent.
        let (input, parameter) = (Value::Object(input), Value::Object(parameter));
        let again = read(&fields, &values_of(&fields, &input, &parameter)).unwrap();
        assert_eq!(
            (Value::Object(again.input), Value::Object(again.parameter)),
            (input, parameter)
        );

        let errors = read(
            &fields,
            &form(&[
                ("input.topic", "  "),
                ("input.shape", "{"),
                ("parameter.count", "4.5"),
                ("parameter.strict", "yes"),
                ("parameter.style", "medium"),
                ("parameter.sizes", "1\nx"),
            ]),
        )
        .unwrap_err();
        let said: Vec<(String, String)> = errors
            .iter()
            .map(|e| (e.name.clone(), e.problem.to_string()))
            .collect();
        let named: Vec<(&str, &str)> = said.iter().map(|(n, p)| (n.as_str(), p.as_str())).collect();
        assert_eq!(named[0], ("input.topic", "is required"));
        assert_eq!(named[1].0, "input.shape");
        assert!(named[1].1.starts_with("is not valid JSON"), "{named:?}");
        assert_eq!(
            &named[2..],
            [
                ("parameter.count", "must be an integer, not '4.5'"),
                ("parameter.strict", "must be true or false, not 'yes'"),
                (
                    "parameter.style",
                    "must be one of short, long, 7, not 'medium'"
                ),
                ("parameter.sizes", "line 2: must be an integer, not 'x'"),
            ]
        );
        // The same problems in Chinese.
        let zh: Vec<String> = errors.iter().map(|e| e.problem.text(Lang::Zh)).collect();
        assert_eq!(zh[0], "为必填项");
        assert_eq!(zh[4], "必须是 short, long, 7 之一，而不是 'medium'");
        assert_eq!(zh[5], "第 2 行：必须是整数，而不是 'x'");
    }

    #[test]
    fn each_bound_the_form_supports_is_checked_on_its_field() {
        let parameter = Schema::parse(
            &json!({"type": "object", "properties": {
                "low": {"type": "integer", "minimum": 1},
                "high": {"type": "number", "maximum": 10},
                "over": {"type": "number", "exclusiveMinimum": 0},
                "under": {"type": "number", "exclusiveMaximum": 1},
                "step": {"type": "number", "multipleOf": 0.5},
                "short": {"type": "string", "minLength": 3},
                "long": {"type": "string", "maxLength": 2},
                "code": {"type": "string", "pattern": "^[a-z]+$"},
                "few": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
                "many": {"type": "array", "items": {"type": "integer", "maximum": 5},
                         "maxItems": 3}}})
            .to_string(),
        )
        .unwrap();
        let fields = fields(None, Some(&parameter));
        let high = fields.iter().find(|f| f.key == "high").unwrap();
        assert_eq!(
            (high.bounds.min_attr(), high.bounds.max_attr()),
            (None, Some("10".into()))
        );
        let sent = |pairs: &[(&str, &str)]| -> Vec<String> {
            let values: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| (format!("parameter.{k}"), v.to_string()))
                .collect();
            read(&fields, &values)
                .err()
                .unwrap_or_default()
                .iter()
                .map(|e| format!("{} {}", e.name, e.problem))
                .collect()
        };
        assert_eq!(
            sent(&[
                ("low", "0"),
                ("high", "10.5"),
                ("over", "0"),
                ("under", "1"),
                ("step", "0.7"),
                ("short", "ab"),
                ("long", "abc"),
                ("code", "A1"),
                ("few", "1"),
                ("many", "1\n9"),
            ]),
            [
                "parameter.code must match the pattern ^[a-z]+$",
                "parameter.few must have at least 2 items",
                "parameter.high must be at most 10, not 10.5",
                "parameter.long must be at most 2 characters long",
                "parameter.low must be at least 1, not 0",
                "parameter.many line 2: must be at most 5, not 9",
                "parameter.over must be more than 0, not 0",
                "parameter.short must be at least 3 characters long",
                "parameter.step must be a multiple of 0.5",
                "parameter.under must be less than 1, not 1",
            ]
        );
        assert!(sent(&[("many", "1\n2\n3\n4")]) == ["parameter.many must have at most 3 items"]);
        assert!(
            sent(&[
                ("low", "1"),
                ("high", "10"),
                ("step", "1.5"),
                ("code", "ok")
            ])
            .is_empty()
        );
    }

    #[test]
    fn a_task_forms_files_go_under_their_own_names() {
        let fields = task_fields("task", "files");
        let chosen = |name: &str| Chosen {
            key: "files".into(),
            name: name.into(),
            bytes: b"x".to_vec(),
        };
        let values = vec![
            ("input.prompt".to_owned(), "do it".to_owned()),
            ("engine".to_owned(), "codex".to_owned()),
        ];
        let files = vec![chosen("C:\\docs\\a.txt"), chosen("a.txt"), chosen("..")];
        let (submitted, engine, files) =
            check_files(&fields, &values, files, &["codex".to_owned()]).unwrap();
        assert_eq!(engine, "codex");
        assert_eq!(submitted.input["prompt"], "do it");
        assert_eq!(submitted.input["files"], json!(["a.txt", "2-a.txt"]));
        let keys: Vec<&str> = files.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["a.txt", "2-a.txt"]);
        // No prompt: named, as any required field.
        let errors =
            check_files(&fields, &values[1..], Vec::new(), &["codex".to_owned()]).unwrap_err();
        assert_eq!(errors[0].name, "input.prompt");
    }
}
