//! How the run tells its caller what it is doing: a callback the front end prints (the library never prints).

/// Something the caller shows the user while a run goes (the library never prints).
pub type Log<'a> = &'a mut dyn FnMut(&str);
