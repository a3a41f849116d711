//! A well-formed component that exports an interface other than chitin's.
wit_bindgen::generate!({ path: "wit", world: "foreign" });

struct Foreign;

impl exports::acme::other::greeter::Guest for Foreign {
    fn greet(name: String) -> String {
        format!("hello {name}")
    }
}

export!(Foreign);
