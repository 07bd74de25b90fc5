//! Groups and invites (contract 3.3): invite, list, accept, decline, dismiss, the
//! `group.invite.received` push, group system notices (never pushed live except the deletion),
//! and group deletion.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::clock::{new_id, now_iso};
use super::error::{Rejection, SimResult};
use super::model::{ConvKind, Conversation, Group, Invite, Ladder, Landing, Member};
use super::store::{NewMessage, Store, bare};

impl Store {
    pub fn create_group(
        &mut self,
        owner: &str,
        name: &str,
        members: &[String],
    ) -> SimResult<String> {
        let owner = bare(owner);
        self.agent(&owner)?;
        let id = new_id("grp");
        let now = now_iso();
        let mut m = BTreeMap::new();
        m.insert(
            owner.clone(),
            Member {
                role: "admin",
                joined_at: now.clone(),
            },
        );
        for h in members {
            let h = bare(h);
            self.agent(&h)?;
            m.entry(h).or_insert(Member {
                role: "member",
                joined_at: now.clone(),
            });
        }
        self.groups.insert(
            id.clone(),
            Group {
                id: id.clone(),
                name: name.to_string(),
                description: None,
                owner,
                members: m,
                created_at: now,
                deleted: None,
            },
        );
        self.convs.insert(
            id.clone(),
            Conversation {
                id: id.clone(),
                kind: ConvKind::Group,
                messages: Vec::new(),
            },
        );
        Ok(id)
    }

    pub fn group(&self, id: &str) -> SimResult<&Group> {
        self.groups
            .get(id)
            .ok_or_else(|| Rejection::not_found("GROUP_NOT_FOUND", format!("no group {id}")))
    }

    pub fn group_detail(&self, id: &str, viewer: &str) -> Value {
        let Some(g) = self.groups.get(id) else {
            return Value::Null;
        };
        let last = self
            .convs
            .get(id)
            .and_then(|c| c.messages.last())
            .and_then(|m| self.messages.get(m));
        json!({
            "id": g.id, "name": g.name, "description": g.description, "avatar_url": null,
            "created_by": g.owner, "settings": {"who_can_invite": "admin"},
            "member_count": g.members.len(), "created_at": g.created_at,
            "last_message_at": last.map(|m| m.created_at.clone()),
            "members": g.members.iter().map(|(h, m)| json!({
                "handle": h, "display_name": self.agents.get(h).map(|a| a.display_name.clone()),
                "role": m.role, "joined_at": m.joined_at,
            })).collect::<Vec<_>>(),
            "your_role": g.members.get(viewer).map(|m| m.role),
        })
    }

    /// Invites `invitee` into `group`: a `group.invite.received` frame, a landing, the ladder (3.3).
    pub fn invite(&mut self, group: &str, inviter: &str, invitee: &str) -> SimResult<String> {
        let (inviter, invitee) = (bare(inviter), bare(invitee));
        self.agent(&invitee)?;
        let g = self.group(group)?;
        if g.deleted.is_some() {
            return Err(Rejection::new(
                410,
                "GROUP_DELETED",
                "this group was deleted",
            ));
        }
        if g.members.contains_key(&invitee) {
            return Err(Rejection::new(
                409,
                "ALREADY_MEMBER",
                format!("@{invitee} is already a member"),
            ));
        }
        if let Some(i) = self
            .invites
            .values()
            .find(|i| i.group_id == group && i.invitee == invitee && i.state == "pending")
        {
            return Ok(i.id.clone());
        }
        let id = new_id("gri");
        let ord = self.ord();
        self.invites.insert(
            id.clone(),
            Invite {
                id: id.clone(),
                group_id: group.to_string(),
                invitee: invitee.clone(),
                inviter: inviter.clone(),
                created_at: now_iso(),
                created_v: self.now_v(),
                ord,
                state: "pending",
                dismissed: false,
            },
        );
        // An invite from a muted agent, or into a muted group, never wakes (3.3): no frame, no
        // end to a held read, no ladder. It is still listed on the tray.
        let muted = self.muted(&invitee, group, &inviter);
        if muted {
            return Ok(id);
        }
        let frame = json!({"type": "group.invite.received", "payload": self.invite_list_item(&id)})
            .to_string();
        // An agent asleep (full pause, suspension) is not woken (contract 3.5): the frame waits
        // for it to wake (`owner`); the invite is on the tray.
        if let Some(a) = self.agents.get_mut(&invitee)
            && a.asleep()
        {
            a.missed_invites.push(id.clone());
        } else {
            self.push(&invitee, &frame, |_| true);
        }
        self.land(&invitee, Landing::Invite);
        self.hook_note(&invitee, super::webhook::Note::Invite(id.clone()));
        let now_v = self.now_v();
        if let Some(a) = self.agents.get_mut(&invitee) {
            a.ladder = Ladder {
                base_v: Some(now_v),
                sent: 0,
                fired: std::mem::take(&mut a.ladder.fired),
            };
        }
        Ok(id)
    }

    /// The list shape of `GET /v1/groups/invites` and the frame payload.
    pub fn invite_list_item(&self, id: &str) -> Value {
        let Some(i) = self.invites.get(id) else {
            return Value::Null;
        };
        let g = self.groups.get(&i.group_id);
        json!({
            "id": i.id, "group_id": i.group_id, "group_name": g.map(|g| g.name.clone()),
            "group_description": g.and_then(|g| g.description.clone()), "group_avatar_url": null,
            "group_member_count": g.map(|g| g.members.len()), "inviter_handle": i.inviter,
            "created_at": i.created_at,
        })
    }

    pub fn list_invites(&self, h: &str) -> Value {
        let mut v: Vec<&Invite> = self
            .invites
            .values()
            .filter(|i| i.invitee == h && i.state == "pending")
            .collect();
        v.sort_by_key(|i| std::cmp::Reverse(i.ord));
        Value::Array(v.iter().map(|i| self.invite_list_item(&i.id)).collect())
    }

    fn pending_invite(&self, h: &str, id: &str) -> SimResult<()> {
        match self.invites.get(id) {
            Some(i) if i.invitee == h && i.state == "pending" => Ok(()),
            _ => Err(Rejection::not_found(
                "INVITE_NOT_FOUND",
                "no pending invite with that id for you",
            )),
        }
    }

    pub fn accept_invite(&mut self, h: &str, id: &str) -> SimResult<Value> {
        self.pending_invite(h, id)?;
        let gid = self
            .invites
            .get(id)
            .map(|i| i.group_id.clone())
            .unwrap_or_default();
        if let Some(i) = self.invites.get_mut(id) {
            i.state = "accepted";
        }
        if let Some(g) = self.groups.get_mut(&gid) {
            g.members.insert(
                h.to_string(),
                Member {
                    role: "member",
                    joined_at: now_iso(),
                },
            );
        }
        self.notice(
            &gid,
            h,
            json!({"schema_version": 1, "event": "member_joined", "agent_handle": h}),
        )?;
        self.progress(h);
        Ok(self.group_detail(&gid, h))
    }

    pub fn decline_invite(&mut self, h: &str, id: &str) -> SimResult<Value> {
        self.pending_invite(h, id)?;
        if let Some(i) = self.invites.get_mut(id) {
            i.state = "declined";
        }
        self.progress(h);
        Ok(json!({"message": "Invite rejected"}))
    }

    pub fn dismiss_invite(&mut self, h: &str, id: &str) -> SimResult<Value> {
        self.pending_invite(h, id)?;
        let mut changed = false;
        if let Some(i) = self.invites.get_mut(id)
            && !i.dismissed
        {
            i.dismissed = true;
            changed = true;
        }
        if changed {
            self.progress(h);
        }
        Ok(json!({"dismissed": true}))
    }

    /// A group system notice from `actor` to every other member. Not pushed live, except
    /// `group_deleted` (contract 4 step 1).
    pub fn notice(&mut self, group: &str, actor: &str, data: Value) -> SimResult<String> {
        let g = self.group(group)?;
        let recipients: Vec<String> = g.members.keys().filter(|h| *h != actor).cloned().collect();
        let event = data
            .get("event")
            .and_then(Value::as_str)
            .unwrap_or("notice")
            .to_string();
        let text = format!("@{actor}: {}", event.replace('_', " "));
        let id = self.store_message(NewMessage {
            conv_id: group,
            sender: actor,
            kind: "system",
            content: json!({"text": text, "data": data}),
            metadata: json!({}),
            client_msg_id: String::new(),
            recipients,
        });
        if let Some(m) = self.messages.get_mut(&id) {
            m.client_msg_id = format!("sys_{id}");
        }
        Ok(id)
    }

    pub fn delete_group(&mut self, group: &str, by: &str) -> SimResult<Value> {
        let by = bare(by);
        let g = self.group(group)?;
        if g.deleted.is_some() {
            return Err(Rejection::new(
                410,
                "GROUP_DELETED",
                "this group was already deleted",
            ));
        }
        let members: Vec<String> = g.members.keys().cloned().collect();
        let at_ = now_iso();
        self.notice(
            group,
            &by,
            json!({"schema_version": 1, "event": "group_deleted", "agent_handle": by}),
        )?;
        if let Some(g) = self.groups.get_mut(group) {
            g.deleted = Some((at_.clone(), by.clone()));
        }
        for i in self
            .invites
            .values_mut()
            .filter(|i| i.group_id == group && i.state == "pending")
        {
            i.state = "cancelled";
        }
        let frame = json!({"type": "group.deleted", "payload": {"group_id": group, "deleted_by_handle": by, "deleted_at": at_}})
            .to_string();
        for m in members.iter().filter(|m| **m != by) {
            self.push(m, &frame, |_| true);
        }
        Ok(json!({"group_id": group, "deleted": true}))
    }
}
